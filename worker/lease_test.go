package worker_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/internal/testlog"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// scheduleAt schedules n tasks due at clock's time, so a worker on that clock finds them due.
func (e *env) scheduleAt(clock shardqtype.Clock, n int) {
	e.t.Helper()
	p, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: clock})
	require.NoError(e.t, err)
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: e.q.Name}
	}
	_, err = p.ScheduleTasks(context.Background(), tasks)
	require.NoError(e.t, err)
}

// leaseEnd reads when the lease of a task in flight ends: the time of its timeout marker.
func (e *env) leaseEnd(id uuid.UUID) time.Time {
	e.t.Helper()
	iter := e.s.Query(`SELECT id FROM tasks WHERE kind = 1 AND task_id = ? ALLOW FILTERING`, gocql.UUID(id)).Iter()
	var end time.Time
	for m := (gocql.UUID{}); iter.Scan(&m); {
		// While a marker moves, the old one may linger a moment: the later one counts.
		if at := shard.IDTime(uuid.UUID(m)); at.After(end) {
			end = at
		}
	}
	require.NoError(e.t, iter.Close())
	return end
}

// TestExpiredTaskIsDropped leases three tasks for one handler, keeps the handler busy
// until the two prefetched tasks' leases have run out, and checks that they are dropped
// (counted in Stats.Expired), not started: they come back by their timeout, attempt 2.
func TestExpiredTaskIsDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	clock := testclock.New(time.Now())
	e.scheduleAt(clock, 3)
	type start struct {
		attempt int
		expired bool
	}
	starts := make(chan start, 10)
	release := make(chan struct{})
	var calls atomic.Int32
	w := e.worker(worker.Config{Concurrency: 1, Prefetch: 2, Clock: clock,
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			starts <- start{task.Attempt, !clock.Now().Before(task.Deadline)}
			if calls.Add(1) == 1 {
				<-release
			}
			return nil
		})})
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)
	select {
	case s := <-starts:
		require.Equal(t, start{1, false}, s)
	case <-time.After(30 * time.Second):
		t.Fatal("no task started")
	}
	require.Eventually(t, func() bool { return w.Stats().Acquired == 3 }, 10*time.Second, 10*time.Millisecond)
	clock.Add(e.q.DefaultTimeout + time.Second) // the prefetched tasks' leases run out
	close(release)

	for range 2 {
		select {
		case s := <-starts:
			require.False(t, s.expired, "a task started after its lease ran out (attempt %d)", s.attempt)
			require.Equal(t, 2, s.attempt, "delivered again by its timeout")
		case <-time.After(30 * time.Second):
			t.Fatal("the expired tasks did not come back")
		}
	}
	st := w.Stats()
	require.Equal(t, uint64(2), st.Expired)
	require.Zero(t, st.Retried, "an expired task is not retried")
	require.Zero(t, st.Released, "nor given back")
}

// TestExtensionRenewsWholeTimeout starts a task with 100 ms of its 2 s lease left, and
// checks that ExtendLeases renews it by the whole 2 s, not by the 100 ms that were left.
func TestExtensionRenewsWholeTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, DefaultTimeout: 2 * time.Second})
	clock := testclock.New(time.Now())
	e.scheduleAt(clock, 2)
	first, second := make(chan struct{}), make(chan *consumer.Task, 1)
	release := make(chan struct{})
	var calls atomic.Int32
	w := e.worker(worker.Config{Concurrency: 1, Prefetch: 1, Clock: clock, ExtendLeases: true,
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			switch calls.Add(1) {
			case 1:
				close(first)
			case 2:
				second <- task
			}
			<-release
			return nil
		})})
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)
	defer close(release)
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("no task started")
	}
	require.Eventually(t, func() bool { return w.Stats().Acquired == 2 }, 10*time.Second, 10*time.Millisecond)
	clock.Add(1900 * time.Millisecond) // the prefetched task has 100 ms left
	release <- struct{}{}              // the first handler returns; the second task starts

	var task *consumer.Task
	select {
	case task = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the prefetched task did not start")
	}
	require.Equal(t, 100*time.Millisecond, task.Deadline.Sub(clock.Now()))
	// The clock stands still from here on; a marker keeps its time to 100 ns.
	want := shard.IDTime(shard.NewID(clock.Now().Add(task.Timeout)))
	require.Eventually(t, func() bool { return !e.leaseEnd(task.ID).Before(want) },
		10*time.Second, 20*time.Millisecond, "the lease was not renewed by the task's whole timeout")
	require.Equal(t, want, e.leaseEnd(task.ID))
}

// TestFailedExtensionBacksOff cuts a running task's worker off Cassandra, so that every
// extension of its 2 s lease fails (not with ErrLeaseLost): the worker tries again a few
// times until the lease runs out, not in a tight loop.
func TestFailedExtensionBacksOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, DefaultTimeout: 2 * time.Second})
	e.schedule(1)
	s := cassandratest.SessionFor(t, e.ks)
	logs := testlog.New(slog.LevelDebug)
	started, ended := make(chan struct{}), make(chan struct{})
	w, err := worker.New(cassandratest.Driver(s), worker.Config{Queue: e.q.Name, Concurrency: 1, ExtendLeases: true, Logger: logs.Logger(),
		Handler: worker.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
			close(started)
			<-ctx.Done()
			close(ended)
			return ctx.Err()
		})})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no task started")
	}
	s.Close() // long before the first extension, halfway through the lease
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end with its lease")
	}
	failed := logs.Find("extending a lease")
	require.NotEmpty(t, failed)
	require.LessOrEqual(t, len(failed), 4, "extensions tried in a tight loop; the first: %s", failed[0])
}
