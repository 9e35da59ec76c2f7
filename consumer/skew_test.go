package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// aheadHost is a host whose system clock leads by d.
type aheadHost struct{ d time.Duration }

func (h aheadHost) Now() time.Time { return time.Now().Add(h.d) }

// A consumer on a host whose clock leads the cluster's by 2 s, with the default clock (the
// cluster's time as that host measures it), delivers no task before its due time by the
// cluster's clock. Judged by the host's own clock, nearly every task ran 2 s early.
func TestHostAheadNeverDeliversEarly(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "ahead", ShardCount: 2, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clustertime.New(store.Of(gocqlv1.New(s)), aheadHost{2 * time.Second}, nil)})
	require.NoError(t, err)
	_, err = c.AcquireTasks(ctx, 1) // measures the offset
	require.NoError(t, err)

	due := map[uuid.UUID]time.Time{}
	start := time.Now()
	for i := range 20 {
		at := start.Add(500*time.Millisecond + time.Duration(i)*100*time.Millisecond)
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, DueAt: at})
		require.NoError(t, err)
		due[id] = at
	}
	early := 0
	for deadline := time.Now().Add(20 * time.Second); len(due) > 0 && time.Now().Before(deadline); {
		got, err := c.AcquireTasks(ctx, 100)
		require.NoError(t, err)
		now := time.Now()
		for _, task := range got {
			// The node runs on this host, so its clock is the real one.
			if now.Before(due[task.ID]) {
				early++
			}
			delete(due, task.ID)
		}
		require.NoError(t, c.AckTasks(ctx, got...))
	}
	require.Empty(t, due, "tasks not delivered")
	require.Zero(t, early, "tasks delivered before their due time")
}

// downCoordinator is a coordinator whose clock cannot be read while down is set, as a
// cluster that times out.
type downCoordinator struct {
	clustertime.Coordinator
	down atomic.Bool
}

func (d *downCoordinator) Now(ctx context.Context) (time.Time, string, error) {
	if d.down.Load() {
		return time.Time{}, "", errors.New("timed out")
	}
	return d.Coordinator.Now(ctx)
}

// A consumer whose cluster clock was never measured takes nothing, whatever its host's
// clock says: judged by a host 4 s ahead, a task due in 3 s was leased at once. Once a
// measure succeeds, the task comes at its due time.
func TestUnmeasuredClockTakesNothing(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "unmeasured", ShardCount: 1, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	due := time.Now().Add(3 * time.Second)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, DueAt: due})
	require.NoError(t, err)

	coord := &downCoordinator{Coordinator: store.Of(gocqlv1.New(s))}
	coord.down.Store(true)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clustertime.New(coord, aheadHost{4 * time.Second}, nil)})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 1)
	require.ErrorIs(t, err, shardq.ErrClockUnmeasured)
	require.Empty(t, got)

	coord.down.Store(false)
	for deadline := time.Now().Add(20 * time.Second); len(got) == 0; {
		require.True(t, time.Now().Before(deadline), "the task was not delivered")
		got, err = c.AcquireTasks(ctx, 1)
		if errors.Is(err, shardq.ErrClockUnmeasured) {
			continue // the failed measure is tried again RetryFailed after it
		}
		require.NoError(t, err)
	}
	// The node runs on this host, so its clock is the real one.
	require.False(t, time.Now().Before(due), "delivered %v before its due time", time.Until(due))
	require.Equal(t, id, got[0].ID)
	require.NoError(t, c.AckTasks(ctx, got...))
}

// A producer and consumer whose clock leads the cluster's by 3 s stamp their writes no
// later than the cluster's time: the swap's delete and the ack, stamped by a coordinator,
// still win, so a task is delivered once and its acked marker never comes back.
func TestLeadingClockDeletesWin(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "leading", ShardCount: 1, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 30 * time.Second})
	require.NoError(t, err)
	// A running clock: one set 3 s ahead and stopped read as 1.43 s ahead on three loaded
	// nodes, where the test took seconds before the clock was measured.
	clock := testclock.NewShifted(3 * time.Second)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	var mu sync.Mutex
	var skews []time.Duration
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock,
		Observer: shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) {
			if sk, ok := e.(shardqtype.ClockSkewed); ok {
				mu.Lock()
				skews = append(skews, sk.Skew)
				mu.Unlock()
			}
		})})
	require.NoError(t, err)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
	again, err := c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, again, "the swap's delete of the task row was shadowed by its insert")
	require.NoError(t, c.AckTasks(ctx, got...))
	clock.Add(40 * time.Second) // past the lease deadline
	again, err = c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, again, "the ack's delete of the marker was shadowed by its insert")

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, skews, "a clock 3 s ahead of the cluster's is reported")
	// The cluster's time is measured to within half a clock read's round trip, which
	// passed a second on three loaded local nodes (2.3 s measured for 3 s).
	require.InDelta(t, 3*time.Second, skews[0], float64(1500*time.Millisecond))
}
