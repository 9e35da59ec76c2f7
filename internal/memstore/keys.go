package memstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/store"
)

// The task_keys table: PRIMARY KEY ((queue, key)), one row per partition.
const (
	colKeyTaskID = iota
	colKeyClaimedAt
)

type keys struct{ *client }

func keyPK(queue, key string) string { return queue + ":" + key }

// args are a claim's values for a condition, nil (null) for a cell not set, as
// store.Claim.args binds them.
func claimArgs(c store.Claim) (holder, at any) {
	if c.Holder != uuid.Nil {
		holder = c.Holder
	}
	if !c.ClaimedAt.IsZero() {
		at = c.ClaimedAt
	}
	return holder, at
}

// claimOf reads a key's row as a claim.
func claimOf(r *row, sec int64) store.Claim {
	return store.Claim{Holder: uuidOf(r.value(colKeyTaskID, sec)), ClaimedAt: timeOf(r.value(colKeyClaimedAt, sec))}
}

func (k keys) Claim(ctx context.Context, queue, key string, claim store.Claim, ttl time.Duration, seen store.Claim) (bool, store.Claim, error) {
	pk := keyPK(queue, key)
	applied := false
	var cur store.Claim
	err := k.exec(ctx, Request{Table: "task_keys", Op: "Keys.Claim", Key: pk, Write: true, Conditional: true}, func(s *state) error {
		secs, err := ttlSeconds(int64(ttl / time.Second))
		if err != nil {
			return err
		}
		holder, at := claimArgs(seen)
		if err := checkUUIDs(claim.Holder); err != nil {
			return err
		}
		if h, ok := holder.(uuid.UUID); ok && !validTimeUUID(h) {
			return errTimeUUID()
		}
		ballot := s.serverStamp()
		r := s.get(s.c.keys, pk, "")
		if applied = equal(r.value(colKeyTaskID, s.sec), holder) && equal(r.value(colKeyClaimedAt, s.sec), at); !applied {
			if r != nil && r.live(s.sec) {
				cur = claimOf(r, s.sec)
			}
			return nil
		}
		// UPDATE: no row marker, so the row lives exactly as long as its two cells.
		s.apply(s.c.keys, pk, op{sets: []set{{colKeyTaskID, claim.Holder}, {colKeyClaimedAt, timestamp(claim.ClaimedAt)}},
			ttl: secs}, ballot)
		return nil
	})
	if err != nil {
		return false, store.Claim{}, err
	}
	return applied, cur, nil
}

// get reads a key's row; ttl also reads TTL(task_id).
func (k keys) get(ctx context.Context, op, queue, key string, serial bool) (store.Claim, time.Duration, error) {
	pk := keyPK(queue, key)
	type got struct {
		c   store.Claim
		ttl time.Duration
	}
	var g *got
	q := query{req: Request{Table: "task_keys", Op: op, Key: pk, Serial: serial}, t: k.c.keys, pk: pk, slices: []slice{whole},
		limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, k.client, q, func(s *state, r *row) got {
		left, _ := r.cellTTL(colKeyTaskID, s.sec)
		return got{claimOf(r, s.sec), time.Duration(left) * time.Second}
	}, func(v got) bool { g = &v; return true })
	switch {
	case err != nil:
		return store.Claim{}, 0, fmt.Errorf("reading key %q of queue %q: %w", key, queue, err)
	case g == nil:
		return store.Claim{}, 0, fmt.Errorf("%w: key %q of queue %q", store.ErrNotFound, key, queue)
	}
	return g.c, g.ttl, nil
}

func (k keys) Get(ctx context.Context, queue, key string, serial bool) (store.Claim, error) {
	c, _, err := k.get(ctx, "Keys.Get", queue, key, serial)
	return c, err
}

func (k keys) GetTTL(ctx context.Context, queue, key string) (store.Claim, time.Duration, error) {
	return k.get(ctx, "Keys.GetTTL", queue, key, false)
}

func (k keys) Release(ctx context.Context, queue, key string, holder uuid.UUID) error {
	pk := keyPK(queue, key)
	return k.exec(ctx, Request{Table: "task_keys", Op: "Keys.Release", Key: pk, Write: true, Conditional: true}, func(s *state) error {
		if err := checkUUIDs(holder); err != nil {
			return err
		}
		ballot := s.serverStamp()
		if equal(s.get(s.c.keys, pk, "").value(colKeyTaskID, s.sec), holder) {
			s.apply(s.c.keys, pk, op{delete: true}, ballot)
		}
		return nil
	})
}
