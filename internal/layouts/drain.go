package layouts

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
)

// SealAfter is how long after a generation's successor takes effect nothing more can be
// written into it: writers place rows by a history at most shardqtype.SettingsRefresh old,
// which knew of the change at least shardqtype.LayoutLead before it took effect, so once
// their clocks (within the consumers' skew of the cluster's) pass it they write into
// the successor; a minute also outlasts any write already under way then.
const SealAfter = time.Minute

// Drain marks h's oldest live generation drained, so readers stop reading its ring, when
// nothing can be written into it any more (now is past its seal) and a read of every
// partition of its ring, inflight at once, finds no task row. It reports whether it read the ring, and whether it marked it drained.
// The write is conditioned on the history being h; its outcome unknown needs no settling,
// because the ring it marks stays empty whoever marks it, or when.
func Drain(ctx context.Context, tables store.Store, h History, now time.Time, inflight int) (looked, drained bool, err error) {
	sealed, ok := h.Sealed(h.Drained, SealAfter)
	if !ok || now.Before(sealed) {
		return false, false, nil
	}
	l := h.Gens[h.Drained].Layout
	empty, err := Empty(ctx, tables.Scans(), l, inflight)
	if err != nil || !empty {
		return true, false, err
	}
	next := h
	next.Drained++
	next.Version++
	applied, err := tables.Queues().SetLayouts(ctx, l.Queue, h.Encode(), next.Encode())
	if err != nil {
		return true, false, fmt.Errorf("layouts: marking generation %d of queue %q drained: %w", l.Generation, l.Queue, err)
	}
	return true, applied, nil
}

// Empty reports whether no partition of l's ring holds a task row (a task, or the
// marker of one in flight or retrying), reading inflight partitions at once and
// stopping at the first row found.
func Empty(ctx context.Context, scans store.Scans, l shard.Layout, inflight int) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var found atomic.Bool
	n := l.BucketCount * l.ShardCount
	err := fanout.Each(n, inflight, func(i int) error {
		if found.Load() {
			return nil
		}
		key := shard.FormatKey(l.Ring(), i/l.ShardCount, i%l.ShardCount)
		err := scans.TaskIDs(ctx, key, 1, func(uuid.UUID) {
			found.Store(true)
			cancel()
		})
		if err != nil && !found.Load() {
			return fmt.Errorf("layouts: reading %s: %w", key, err)
		}
		return nil
	})
	if found.Load() {
		return false, nil
	}
	return err == nil, err
}
