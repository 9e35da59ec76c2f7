package consumer_test

// Interleavings found by review of the outranked-marker rule (take.go, outranked), on the
// simulator's store (internal/memstore) under testing/synctest, where each step can be put
// exactly: each lost a task while a marker was dropped beside a lease declared but never
// taken effect. TestOutrankedOnlyByALeaseThatTookEffect pins the first on a real node.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// rig is a simulated cluster with one queue of one shard, on the bubble's clock.
type rig struct {
	t       *testing.T
	cluster *memstore.Cluster
	q       shardqtype.QueueConfig
}

func newRig(t *testing.T) *rig {
	cl, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	q := shardqtype.QueueConfig{Name: "q", ShardCount: 1, BucketCount: 60, BucketDuration: time.Second, DefaultTimeout: 3 * time.Second}.WithDefaults()
	_, _, err = cl.Client(memstore.ClientConfig{Clock: time.Now}).Queues().Create(context.Background(), store.Queue(q))
	require.NoError(t, err)
	return &rig{t: t, cluster: cl, q: q}
}

func (r *rig) driver(gate memstore.Gate) *shardqtype.Driver {
	d := driver.New(nil)
	sessionstate.Bind(d, sessionstate.New(r.cluster.Client(memstore.ClientConfig{Clock: time.Now, Gate: gate}), nil, nil))
	return d
}

func (r *rig) consumer(gate memstore.Gate) *consumer.Consumer {
	c, err := consumer.New(r.driver(gate), consumer.Config{Queue: r.q.Name})
	require.NoError(r.t, err)
	return c
}

// schedule schedules one task due now.
func (r *rig) schedule() uuid.UUID {
	p, err := producer.New(r.driver(nil), producer.Config{})
	require.NoError(r.t, err)
	id, err := p.ScheduleTask(context.Background(), producer.Task{Queue: r.q.Name, Payload: []byte("x")})
	require.NoError(r.t, err)
	return id
}

// acquireFor polls c for up to d and returns what it got.
func (r *rig) acquireFor(c *consumer.Consumer, d time.Duration) []*consumer.Task {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		got, err := c.AcquireTasks(context.Background(), 10)
		require.NoError(r.t, err)
		if len(got) > 0 {
			return got
		}
	}
	return nil
}

// leased leases the one task there is with h.
func (r *rig) leased(h *consumer.Consumer) *consumer.Task {
	got := r.acquireFor(h, 5*time.Second)
	require.Len(r.t, got, 1)
	return got[0]
}

// raceTake runs a take of the expired marker of held that calls move (the holder's) just
// before its swap, which then must not apply.
func (r *rig) raceTake(held *consumer.Task, move func() error) {
	time.Sleep(time.Until(held.Deadline) + 200*time.Millisecond)
	c := r.consumer(nil)
	moved := false
	consumer.SetBeforeSwap(c, func() {
		if !moved {
			moved = true
			assert.NoError(r.t, move())
		}
	})
	got, err := c.AcquireTasks(context.Background(), 10)
	require.NoError(r.t, err)
	require.Empty(r.t, got, "the take's swap applied though the holder moved the marker")
}

// A holder's Extend, just past its deadline, wins against a take of its expired marker
// (whose declaration, a delivery later, stays in the index); the holder then dies, and
// its extended marker must deliver the task.
func TestSimExtendRaceKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		id := r.schedule()
		h := r.consumer(nil)
		held := r.leased(h)
		r.raceTake(held, func() error { return h.Extend(ctx, held, 10*time.Second) })

		time.Sleep(time.Until(held.Deadline) + 500*time.Millisecond)
		again := r.acquireFor(r.consumer(nil), 20*time.Second)
		require.Len(t, again, 1, "task %s lost", id)
	})
}

// An Extend whose marker move applied but whose outcome stayed unknown (the read back
// failed), then tried again as worker.keepLease does a quarter term later: the retry's
// entry names neither the marker the first move wrote nor the old one, and the retry finds
// its lease lost. The first move's marker is the task.
func TestSimExtendUnknownThenRetryKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		id := r.schedule()
		faulty := false
		h := r.consumer(func(_ context.Context, q memstore.Request) (memstore.Fault, error) {
			if !faulty {
				return memstore.None, nil
			}
			switch q.Op {
			case "Leasing.DeleteMarker", "Leasing.ReplaceMarker":
				return memstore.NoResponseApplied, nil
			case "Leasing.MarkersThere":
				faulty = false
				return memstore.Unavailable, nil
			}
			return memstore.None, nil
		})
		held := r.leased(h)
		time.Sleep(held.Timeout / 2)
		faulty = true
		require.ErrorIs(t, h.Extend(ctx, held, 10*time.Second), lwt.ErrOutcomeUnknown)
		time.Sleep(held.Timeout / 4)
		require.ErrorIs(t, h.Extend(ctx, held, 10*time.Second), consumer.ErrLeaseLost)

		again := r.acquireFor(r.consumer(nil), 30*time.Second)
		require.Len(t, again, 1, "task %s lost", id)
	})
}

// A holder's Retry wins against a take of its expired marker whose partition's lock
// tokens run higher than those of the retry row's partition; the retry row is leased
// there with a lower lease step, so that declaration is hidden below the failed take's.
// Its holder dies, and its marker must deliver the task.
func TestSimRetryRaceAcrossPartitionsKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		id := r.schedule()
		h := r.consumer(nil)
		held := r.leased(h)
		lay := r.q.Layout()
		key := lay.Key(lay.Bucket(held.Deadline), lay.ShardFor(id))
		locker, err := lock.New(r.driver(nil), lock.Config{})
		require.NoError(t, err)
		for range 20 {
			lk, err := locker.Acquire(ctx, key)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
		}
		r.raceTake(held, func() error { return h.Retry(ctx, held, 5*time.Second) })

		dg := r.acquireFor(r.consumer(nil), 10*time.Second)
		require.Len(t, dg, 1, "the retry was not delivered")
		time.Sleep(time.Until(dg[0].Deadline) + 500*time.Millisecond)
		again := r.acquireFor(r.consumer(nil), 20*time.Second)
		require.Len(t, again, 1, "task %s lost", id)
	})
}
