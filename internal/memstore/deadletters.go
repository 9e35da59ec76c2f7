package memstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/shard"
)

// The dead_letters table: PRIMARY KEY ((queue, day), dead_id), dead_id DESC, with a
// default TTL of 30 days.
const (
	colDeadTaskID = iota
	colDeadPayload
	colDeadPriority
	colDeadDueAt
	colDeadTimeout
	colDeadAttempt
	colDeadDeliveries
	colDeadError
	colDeadDiedAt
	colDeadHeaders
	colDeadKind
)

type letters struct{ *client }

func letterPK(queue string, day int) string { return queue + ":" + strconv.Itoa(day) }

func letterCK(id uuid.UUID) string { return ckUUID(id, true) }

func letterOf(queue string, r *row, sec int64) deadletters.Letter {
	v := func(col int) any { return r.value(col, sec) }
	return deadletters.Letter{ID: r.key[0].(uuid.UUID), TaskID: uuidOf(v(colDeadTaskID)), Queue: queue,
		Payload: readBlob(v(colDeadPayload)), Priority: int(int8Of(v(colDeadPriority))), DueAt: timeOf(v(colDeadDueAt)),
		Timeout: time.Duration(int64Of(v(colDeadTimeout))) * time.Millisecond, Attempt: int(int32Of(v(colDeadAttempt))),
		Deliveries: int64Of(v(colDeadDeliveries)), Error: stringOf(v(colDeadError)), DiedAt: timeOf(v(colDeadDiedAt)),
		Headers: headersOf(v(colDeadHeaders)), Kind: stringOf(v(colDeadKind))}
}

func (d letters) Write(ctx context.Context, l deadletters.Letter) error {
	pk := letterPK(l.Queue, deadletters.Day(shard.IDTime(l.ID)))
	err := d.exec(ctx, Request{Table: "dead_letters", Op: "DeadLetters.Write", Key: pk, Write: true}, func(s *state) error {
		if err := checkUUIDs(l.ID, l.TaskID); err != nil {
			return err
		}
		sets := []set{{colDeadTaskID, l.TaskID}, {colDeadPayload, blob(l.Payload)}, {colDeadPriority, int8(l.Priority)},
			{colDeadDueAt, timestamp(l.DueAt)}, {colDeadTimeout, l.Timeout.Milliseconds()}, {colDeadAttempt, int32(l.Attempt)},
			{colDeadDeliveries, l.Deliveries}, {colDeadError, l.Error}, {colDeadDiedAt, timestamp(l.DiedAt)}}
		if len(l.Headers) > 0 {
			sets = append(sets, set{colDeadHeaders, maps.Clone(l.Headers)})
		}
		if l.Kind != "" {
			sets = append(sets, set{colDeadKind, l.Kind})
		}
		s.apply(s.c.letters, pk, op{ck: letterCK(l.ID), key: []any{l.ID}, insert: true, ttl: s.c.letters.defaultTTL,
			sets: sets}, s.serverStamp()) // stamped by the coordinator, as the ack that follows it is
		return nil
	})
	if err != nil {
		return fmt.Errorf("deadletters: writing dead letter of %s: %w", l.TaskID, err)
	}
	return nil
}

// scan reads the letters of one day's partition within sl.
func (d letters) scan(ctx context.Context, op, queue string, day int, sl slice, limit int) ([]deadletters.Letter, error) {
	pk := letterPK(queue, day)
	var out []deadletters.Letter
	q := query{req: Request{Table: "dead_letters", Op: op, Key: pk}, t: d.c.letters, pk: pk, slices: []slice{sl}, limit: limit,
		pageSize: defaultPageSize}
	err := read(ctx, d.client, q, func(s *state, r *row) deadletters.Letter { return letterOf(queue, r, s.sec) },
		func(l deadletters.Letter) bool { out = append(out, l); return true })
	if err != nil {
		return nil, fmt.Errorf("deadletters: reading dead letters of %q: %w", queue, err)
	}
	return out, nil
}

func (d letters) Page(ctx context.Context, queue string, now time.Time, after uuid.UUID, limit int) ([]deadletters.Letter, error) {
	today := deadletters.Day(now)
	day := today
	if after != uuid.Nil {
		day = min(day, deadletters.Day(shard.IDTime(after)))
	}
	var out []deadletters.Letter
	for ; day > today-deadletters.Days && len(out) < limit; day-- {
		sl := whole
		if after != uuid.Nil && day == deadletters.Day(shard.IDTime(after)) {
			sl = slice{lo: letterCK(after), open: true} // dead_id < after, newest first
		}
		letters, err := d.scan(ctx, "DeadLetters.Page", queue, day, sl, limit-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, letters...)
	}
	return out, nil
}

func (d letters) Get(ctx context.Context, queue string, id uuid.UUID) (deadletters.Letter, bool, error) {
	letters, err := d.scan(ctx, "DeadLetters.Get", queue, deadletters.Day(shard.IDTime(id)), point(letterCK(id)), math.MaxInt)
	if err != nil || len(letters) == 0 {
		return deadletters.Letter{}, false, err
	}
	return letters[0], true, nil
}

func (d letters) Delete(ctx context.Context, queue string, id uuid.UUID, stamp int64) error {
	pk := letterPK(queue, deadletters.Day(shard.IDTime(id)))
	err := d.exec(ctx, Request{Table: "dead_letters", Op: "DeadLetters.Delete", Key: pk, Write: true}, func(s *state) error {
		if err := checkUUIDs(id); err != nil {
			return err
		}
		s.apply(s.c.letters, pk, op{ck: letterCK(id), key: []any{id}, delete: true}, stamp)
		return nil
	})
	if err != nil {
		return fmt.Errorf("deadletters: deleting dead letter %s: %w", id, err)
	}
	return nil
}

func (d letters) Count(ctx context.Context, queue string, now time.Time, pageSize int, done func()) (int, error) {
	today := deadletters.Day(now)
	n := 0
	for day := today - deadletters.Days + 1; day <= today; day++ {
		pk := letterPK(queue, day)
		q := query{req: Request{Table: "dead_letters", Op: "DeadLetters.Count/page", Key: pk}, t: d.c.letters, pk: pk,
			slices: []slice{whole}, limit: math.MaxInt, pageSize: pageSize}
		err := read(ctx, d.client, q, func(*state, *row) struct{} { return struct{}{} }, func(struct{}) bool { n++; return true })
		if err != nil {
			return 0, fmt.Errorf("deadletters: counting dead letters of day %d: %w", day, err)
		}
		done()
	}
	return n, nil
}
