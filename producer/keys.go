package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// MaxKeyBytes is the longest unique key accepted.
const MaxKeyBytes = 512

// KeyClaimGrace is how long a key claimed by a task that cannot be found yet is still
// honoured: the claimer may be writing it. A call that claims keys writes its tasks
// within half of it or fails.
const KeyClaimGrace = time.Minute

// ErrDuplicate is matched by *DuplicateError.
var ErrDuplicate = errors.New("producer: duplicate key")

// DuplicateError means a task's unique key is held by another task still pending, in
// flight or retrying (or, for up to KeyClaimGrace, being scheduled). It matches
// ErrDuplicate. Nothing of the call that returned it was written.
type DuplicateError struct {
	Queue      string
	Key        string
	ExistingID uuid.UUID
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("producer: key %q of queue %q is held by task %s", e.Key, e.Queue, e.ExistingID)
}

func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

func checkKeys(tasks []Task) error {
	seen := map[[2]string]int{}
	for i, t := range tasks {
		if t.Key == "" {
			continue
		}
		if len(t.Key) > MaxKeyBytes {
			return defaults.Invalid(fmt.Sprintf("tasks[%d].Key", i), "%d bytes is over the %d allowed", len(t.Key), MaxKeyBytes)
		}
		k := [2]string{t.Queue, t.Key}
		if j, ok := seen[k]; ok {
			return defaults.Invalid(fmt.Sprintf("tasks[%d].Key", i), "%q is also the key of tasks[%d]", t.Key, j)
		}
		seen[k] = i
	}
	return nil
}

// claimKeys claims the keys of the tasks that have one. It returns the context to write
// them under, bounded to half of KeyClaimGrace when keys were claimed. If any key is
// held, the keys claimed are released and the first *DuplicateError is returned.
func (p *Producer) claimKeys(ctx context.Context, tasks []Task, rows []taskrow.Row, now time.Time) (context.Context, context.CancelFunc, error) {
	var keyed []int
	for i, t := range tasks {
		if t.Key != "" {
			keyed = append(keyed, i)
		}
	}
	if len(keyed) == 0 {
		return ctx, func() {}, nil
	}
	claimed := make([]bool, len(keyed))
	errs := make([]error, len(keyed))
	_ = fanout.Each(len(keyed), p.cfg.WritesInFlight, func(j int) error {
		i := keyed[j]
		ttl := taskindex.TTL(now, shard.IDTime(rows[i].ID))
		errs[j] = p.claim(ctx, tasks[i].Queue, tasks[i].Key, rows[i].TaskID, ttl, store.Claim{})
		claimed[j] = errs[j] == nil
		return nil
	})
	for j, err := range errs {
		if err == nil {
			continue
		}
		for k, ok := range claimed {
			if ok {
				p.unclaim(ctx, tasks[keyed[k]].Queue, tasks[keyed[k]].Key, rows[keyed[k]].TaskID)
			}
		}
		return ctx, nil, fmt.Errorf("tasks[%d]: %w", keyed[j], err)
	}
	wctx, cancel := context.WithTimeout(ctx, KeyClaimGrace/2)
	return wctx, cancel, nil
}

// claim makes id the holder of key for ttl, or returns a *DuplicateError; seen is the
// key's row as last read (zero: none). Each write is conditioned on the row as last read,
// so of racing claimers exactly one wins, and a row that changed since (a holder replayed
// or rescheduled, say) is looked at again. A row naming a task that is done (or was never
// written, once KeyClaimGrace has passed), or nobody, is taken over; one naming id is
// written again, so the claim lasts ttl from now.
func (p *Producer) claim(ctx context.Context, queue, key string, id uuid.UUID, ttl time.Duration, seen store.Claim) error {
	for range 5 {
		now := p.cfg.Clock.Now()
		applied, cur, err := p.writeClaim(ctx, queue, key, id, ttl, now, seen)
		switch {
		case err != nil:
			return fmt.Errorf("claiming key %q: %w", key, err)
		case applied:
			return nil
		}
		seen = cur
		if cur.Holder == uuid.Nil || cur.Holder == id {
			continue
		}
		live, err := p.holds(ctx, cur.Holder, cur.ClaimedAt, now)
		if err != nil {
			return fmt.Errorf("claiming key %q: %w", key, err)
		}
		if live {
			return &DuplicateError{Queue: queue, Key: key, ExistingID: cur.Holder}
		}
	}
	return fmt.Errorf("claiming key %q: %w: contended five times", key, lwt.ErrOutcomeUnknown)
}

// writeClaim makes id the holder of key until ttl from now if the row is still seen. It
// returns whether it did, and else the row as it is.
func (p *Producer) writeClaim(ctx context.Context, queue, key string, id uuid.UUID, ttl time.Duration, now time.Time, seen store.Claim) (bool, store.Claim, error) {
	keys := p.store.Keys()
	var cur store.Claim
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		var applied bool
		var err error
		applied, cur, err = keys.Claim(ctx, queue, key, store.Claim{Holder: id, ClaimedAt: now}, ttl, seen)
		return applied, err
	}, func(rctx context.Context, cause error) (bool, error) {
		// Only this write names id at now; a straggler that applies after the read can
		// only make id the holder, and the next write, conditioned on the row read here,
		// then sees it.
		var err error
		cur, err = keys.Get(rctx, queue, key, true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("%w: %w (reading back: %w)", lwt.ErrOutcomeUnknown, cause, err)
		}
		return cur.Holder == id && cur.ClaimedAt.Equal(now.Truncate(time.Millisecond)), nil
	})
	return applied, cur, err
}

// keepClaim makes sure key, held by task id, stays claimed for at least ttl: a task moved
// later must keep its key as long as it can still run. A claim already long enough is
// left as it is; one gone (or taken by a task that is done) is claimed again. It returns
// a *DuplicateError when another live task holds the key.
func (p *Producer) keepClaim(ctx context.Context, queue, key string, id uuid.UUID, ttl time.Duration) error {
	seen, left, err := p.store.Keys().GetTTL(ctx, queue, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		seen = store.Claim{}
	case err != nil:
		return fmt.Errorf("producer: %w", err)
	case seen.Holder == id && left >= ttl:
		return nil
	}
	return p.claim(ctx, queue, key, id, ttl, seen)
}

// holds reports whether task id, which holds a key claimed at claimedAt, still keeps it.
func (p *Producer) holds(ctx context.Context, id uuid.UUID, claimedAt, now time.Time) (bool, error) {
	l, err := p.tasks.Locate(ctx, id)
	switch {
	case errors.Is(err, shardqtype.ErrTaskNotFound):
		// Never written yet, or written and finished so long ago that its entry is gone
		// (taskindex.Finished is longer than the grace).
		return now.Sub(claimedAt) < KeyClaimGrace, nil
	case err != nil:
		return false, err
	}
	return l.State == taskindex.Scheduled || l.State == taskindex.InFlight || l.State == taskindex.Retrying, nil
}

// unclaim gives back a key claimed by a call that then failed before writing anything.
// A failure leaves the claim, which others take over once KeyClaimGrace has passed.
func (p *Producer) unclaim(ctx context.Context, queue, key string, id uuid.UUID) {
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	if err := p.store.Keys().Release(rctx, queue, key, id); err != nil {
		p.cfg.Logger.WarnContext(ctx, "giving back a key claim", "queue", queue, "key", key, "error", err)
	}
}
