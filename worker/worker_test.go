package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/internal/testlog"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

type env struct {
	t  *testing.T
	ks string
	s  *gocql.Session
	q  shardqtype.QueueConfig
	p  *producer.Producer
}

// newEnv makes a queue with a unique name, so that in-process wake-ups of parallel
// tests do not cross.
func newEnv(t *testing.T, q shardqtype.QueueConfig) *env {
	t.Helper()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	q.Name = "q" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if q.BucketCount == 0 {
		q.BucketCount, q.BucketDuration = 60, time.Second
	}
	if q.DefaultTimeout == 0 {
		q.DefaultTimeout = 10 * time.Second
	}
	q, err := shardq.CreateQueue(context.Background(), cassandratest.Driver(s), q)
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	return &env{t: t, ks: ks, s: s, q: q, p: p}
}

func (e *env) schedule(n int) map[uuid.UUID]bool {
	e.t.Helper()
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: e.q.Name, Payload: []byte("t")}
	}
	ids, err := e.p.ScheduleTasks(context.Background(), tasks)
	require.NoError(e.t, err)
	set := map[uuid.UUID]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return set
}

func (e *env) worker(cfg worker.Config) *worker.Worker {
	e.t.Helper()
	cfg.Queue = e.q.Name
	if cfg.MaxIdleInterval == 0 {
		cfg.MaxIdleInterval = 200 * time.Millisecond
	}
	w, err := worker.New(cassandratest.Driver(e.s), cfg)
	require.NoError(e.t, err)
	return w
}

func stop(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
}

// remaining counts task rows (pending or leased) left in the queue's partitions.
func (e *env) remaining() int {
	e.t.Helper()
	return cassandratest.CountTaskRows(e.t, e.s, e.q.Layout())
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 4})
	want := e.schedule(60)
	var running, peak atomic.Int64
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	all := make(chan struct{})
	w := e.worker(worker.Config{Concurrency: 3, Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond) // the work
		mu.Lock()
		defer mu.Unlock()
		if seen[task.ID]++; len(seen) == len(want) {
			close(all)
		}
		return nil
	})})
	require.NoError(t, w.Start(context.Background()))
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("tasks not all handled")
	}
	stop(t, w)
	require.Equal(t, int64(3), peak.Load())
	for id, n := range seen {
		require.True(t, want[id])
		require.Equal(t, 1, n)
	}
	st := w.Stats()
	require.Equal(t, uint64(60), st.Succeeded)
	require.Equal(t, uint64(60), st.Acked, "every success acked, in batches")
	require.Zero(t, e.remaining())
}

func TestPanicAndRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	e.schedule(1)
	var attempts []int
	var mu sync.Mutex
	var finished []shardqtype.TaskFinished
	done := make(chan struct{})
	w := e.worker(worker.Config{
		Backoff: func(int) time.Duration { return 0 },
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if f, ok := ev.(shardqtype.TaskFinished); ok {
				mu.Lock()
				finished = append(finished, f)
				mu.Unlock()
			}
		}),
		Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			mu.Lock()
			attempts = append(attempts, task.Attempt)
			mu.Unlock()
			switch task.Attempt {
			case 1:
				panic("boom")
			case 2:
				return errors.New("not yet")
			}
			close(done)
			return nil
		}),
	})
	require.NoError(t, w.Start(context.Background()))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("third attempt never came")
	}
	stop(t, w)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, attempts)
	require.True(t, finished[0].Panicked)
	require.ErrorContains(t, finished[0].Err, "boom")
	require.ErrorContains(t, finished[0].Err, "worker_test.go", "the stack is recorded")
	require.ErrorContains(t, finished[1].Err, "not yet")
	require.NoError(t, finished[2].Err)
	st := w.Stats()
	require.Equal(t, uint64(1), st.Panicked)
	require.Equal(t, uint64(2), st.Retried)
	require.Equal(t, uint64(1), st.Acked)
	require.Zero(t, e.remaining())
}

// TestDeadLetter runs a task that fails every attempt: it is listed among the queue's
// dead letters with its last error, Get reports it dead, and once replayed (and the
// handler fixed) it runs again from attempt 1 with a greater fencing token and succeeds.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	ctx := context.Background()
	id := func() uuid.UUID {
		for id := range e.schedule(1) {
			return id
		}
		return uuid.Nil
	}()
	dead := make(chan struct{})
	var fixed atomic.Bool
	type run struct {
		attempt int
		token   int64
	}
	runs := make(chan run, 8)
	w := e.worker(worker.Config{
		MaxAttempts: 2,
		Backoff:     func(int) time.Duration { return 0 },
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if _, ok := ev.(shardqtype.DeadLettered); ok {
				close(dead)
			}
		}),
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			runs <- run{task.Attempt, task.Token}
			if fixed.Load() {
				return nil
			}
			return errors.New("always")
		}),
	})
	require.NoError(t, w.Start(ctx))
	defer stop(t, w)
	select {
	case <-dead:
	case <-time.After(30 * time.Second):
		t.Fatal("never dead-lettered")
	}
	require.Equal(t, run{1, 1}, <-runs)
	require.Equal(t, run{2, 2}, <-runs)

	in, err := inspect.New(cassandratest.Driver(e.s), inspect.Config{})
	require.NoError(t, err)
	letters, err := in.DeadLetters(ctx, e.q.Name, inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, id, letters[0].ID)
	require.Equal(t, 2, letters[0].Attempt)
	require.Equal(t, "always", letters[0].LastError)
	info, err := in.Task(ctx, id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskDead, info.State)
	require.Equal(t, "always", info.LastError)
	require.Zero(t, e.remaining(), "a dead letter leaves the queue")
	require.Equal(t, uint64(1), w.Stats().DeadLettered)

	fixed.Store(true)
	replayed, err := e.p.ReplayDeadLetter(ctx, e.q.Name, letters[0].DeadLetterID)
	require.NoError(t, err)
	require.Equal(t, id, replayed)
	select {
	case r := <-runs:
		require.Equal(t, 1, r.attempt, "attempts start again")
		require.Greater(t, r.token, int64(2), "the fencing token keeps growing")
	case <-time.After(30 * time.Second):
		t.Fatal("the replayed task never ran")
	}
	letters, err = in.DeadLetters(ctx, e.q.Name, inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Empty(t, letters, "the dead letter is gone once replayed")
	require.Eventually(t, func() bool {
		_, err := in.Task(ctx, id)
		return errors.Is(err, shardqtype.ErrTaskNotFound)
	}, 10*time.Second, 10*time.Millisecond, "acked after the replay")
}

// TestRetryDelayCappedAtMaxTimeout fails a task on a queue with default settings, whose
// longest delay is 19m50s, with DefaultBackoff's delay for attempt 12 (over half an
// hour): the worker schedules the retry at the queue's limit instead of having it
// rejected and the task come back at its timeout without backoff.
func TestRetryDelayCappedAtMaxTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{}.WithDefaults())
	require.Equal(t, 19*time.Minute+50*time.Second, e.q.MaxTimeout())
	e.schedule(1)
	logs := testlog.New(slog.LevelDebug)
	retried := make(chan shardqtype.Retried, 1)
	w := e.worker(worker.Config{
		Logger:  logs.Logger(),
		Backoff: func(int) time.Duration { return worker.DefaultBackoff(12) },
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if r, ok := ev.(shardqtype.Retried); ok {
				retried <- r
			}
		}),
		Handler: worker.HandlerFunc(func(context.Context, *consumer.Task) error { return errors.New("fails") }),
	})
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)
	require.Eventually(t, func() bool {
		return w.Stats().Retried > 0 || len(logs.Find("scheduling a retry")) > 0
	}, 30*time.Second, 10*time.Millisecond, "the task was neither retried nor its retry refused")
	require.Empty(t, logs.Find("scheduling a retry"), "the retry was refused")
	select {
	case r := <-retried:
		require.Equal(t, e.q.MaxTimeout(), r.Delay)
	case <-time.After(10 * time.Second):
		t.Fatal("no Retried event")
	}
	require.Equal(t, uint64(1), w.Stats().Retried)
}

// TestGracefulStop stops a worker while handlers are mid-way: the ones that finish in
// time are acked, the ones still running are abandoned and come back after their
// timeout, leased tasks no handler started are given back at once; none is lost. The
// timeout is long enough for the prefetched tasks' leases to outlast the run to the stop
// on a loaded machine: with 3 s they ran out first once, under the race detector in CI,
// and none was given back.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 2, DefaultTimeout: 10 * time.Second})
	want := e.schedule(20)
	started := make(chan uuid.UUID, 20)
	quick := make(chan struct{})
	var mu sync.Mutex
	finished := map[uuid.UUID]bool{}
	w := e.worker(worker.Config{Concurrency: 4, Prefetch: 8, Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		started <- task.ID
		mu.Lock()
		slow := len(finished) >= 2 // the first two finish when told; the rest hang on
		mu.Unlock()
		if !slow {
			<-quick
			mu.Lock()
			finished[task.ID] = true
			mu.Unlock()
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	})})
	require.NoError(t, w.Start(context.Background()))
	for range 4 {
		<-started // four handlers busy, eight more tasks prefetched
	}
	close(quick)
	require.Eventually(t, func() bool { return w.Stats().Succeeded >= 2 }, 10*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Stop(ctx), context.DeadlineExceeded)
	require.NoError(t, w.Stop(context.Background()), "Stop again returns at once")

	st := w.Stats()
	require.Equal(t, st.Succeeded, st.Acked, "exactly the finished tasks were acked")
	require.Positive(t, st.Released, "prefetched tasks were given back (%d ran out while they waited)", st.Expired)

	// Everything not acked comes back: the abandoned after their timeout.
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name})
	require.NoError(t, err)
	var back []*consumer.Task
	require.Eventually(t, func() bool {
		got, err := c.AcquireTasks(context.Background(), 100)
		require.NoError(t, err)
		back = append(back, got...)
		return len(back)+int(st.Acked) >= len(want)
	}, 30*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, task := range back {
		require.False(t, finished[task.ID], "a finished task came back")
		require.True(t, want[task.ID])
	}
	require.Len(t, back, len(want)-int(st.Acked))
	require.NoError(t, c.AckTasks(context.Background(), back...))
}

// TestRunUntilExitsBeforeDeadline runs workers until a deadline, on more tasks than a run
// can handle (4 at a time, 40 ms each, 12 s at most): each returns in time, having acked
// what it handled and put the rest back. A run that handled nothing proves little, as a
// loaded machine may not lease a task in its time; nor does one whose acks it cut off at
// the deadline (a busy node answered late: those tasks come back after their timeout,
// or are gone if the ack landed unconfirmed), so the next run gets twice as long.
func TestRunUntilExitsBeforeDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 4})
	const tasks = 2000
	e.schedule(tasks)
	acked, unconfirmed := 0, 0
	for budget := 1500 * time.Millisecond; ; budget *= 2 {
		require.LessOrEqual(t, budget, 12*time.Second, "no run handled and acked a task in its time")
		w := e.worker(worker.Config{Concurrency: 4, Handler: worker.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
			select {
			case <-time.After(40 * time.Millisecond): // the work
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})})
		deadline := time.Now().Add(budget)
		// A busy node can hold the stop's last writes past the deadline: RunUntil then
		// returns on time with a StopError, and that run counts as cut off.
		err := w.RunUntil(context.Background(), deadline)
		var stopErr *worker.StopError
		if err != nil {
			require.ErrorAs(t, err, &stopErr)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		late := time.Since(deadline)
		if stopErr != nil {
			// It gave up on them at the deadline itself.
			late -= 500 * time.Millisecond
		}
		require.Negative(t, late, "returned %v after the deadline", time.Since(deadline))
		st := w.Stats()
		require.LessOrEqual(t, st.Acked, st.Succeeded)
		acked += int(st.Acked)
		unconfirmed += int(st.Succeeded - st.Acked)
		// By task, not row: a take the deadline cut between its markers and its swap
		// leaves markers beside the rows (copies, delivered again at their deadline).
		ids, scanErr := taskscan.TaskIDs(context.Background(), cassandratest.Driver(e.s), e.q, 8, 1000)
		require.NoError(t, scanErr)
		left := len(distinct(ids))
		require.LessOrEqual(t, left, tasks-acked, "acked tasks are gone")
		require.GreaterOrEqual(t, left, tasks-acked-unconfirmed, "the rest is still queued, none lost")
		if err == nil && st.Acked > 0 && st.Acked == st.Succeeded {
			break
		}
		t.Logf("a %v run handled %d tasks and acked %d (stop: %v)", budget, st.Succeeded, st.Acked, err)
	}
	require.Less(t, acked, tasks)
}

// TestIdleWorkerMakesNoBurst counts every CQL request an idle worker makes: a steady
// trickle bounded by one peek per candidate partition per idle interval, with no LWT.
func TestIdleWorkerMakesNoBurst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 20, BucketCount: 50, BucketDuration: 10 * time.Second})
	var mu sync.Mutex
	var at []time.Time
	var lwts int
	s := cassandratest.SessionFor(t, e.ks, func(c *gocql.ClusterConfig) {
		c.QueryObserver = queryObserver(func(q gocql.ObservedQuery) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, q.Start)
			if strings.Contains(q.Statement, " IF ") {
				lwts++
			}
		})
	})
	w, err := worker.New(cassandratest.Driver(s), worker.Config{Queue: e.q.Name, MaxIdleInterval: time.Second,
		Handler: worker.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)

	// The first poll looks back a whole lap, however long a loaded node makes it take;
	// count from its end, over three idle intervals.
	require.Eventually(t, func() bool { return w.Stats().Polls > 0 }, 30*time.Second, 10*time.Millisecond)
	from := time.Now()
	require.Eventually(t, func() bool { return time.Since(from) > 3*time.Second }, 10*time.Second, 100*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	var window []time.Time
	for _, ts := range at {
		if ts.After(from) {
			window = append(window, ts)
		}
	}
	span := time.Since(from).Seconds()
	perPoll := 20 * 3 // at most three partitions a shard: a lagging, the current, the next bucket
	require.LessOrEqual(t, float64(len(window))/span, float64(perPoll)/0.8, "requests/s over %.1fs", span)
	require.Zero(t, lwts, "an idle worker takes no lock")
	t.Logf("idle worker, 50 buckets x 20 shards, 1s idle interval: %.1f requests/s", float64(len(window))/span)
}

type queryObserver func(gocql.ObservedQuery)

func (f queryObserver) ObserveQuery(_ context.Context, q gocql.ObservedQuery) { f(q) }

// TestWakeOnLocalSchedule shows an idle worker with a long idle interval runs a task at
// once when a producer in the same process schedules it: through the in-process bus
// alone, as neither its idle interval nor its reads of the wake-up signals (every 10
// minutes) come within the test's bound.
func TestWakeOnLocalSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 4})
	ran := make(chan time.Time, 1)
	w := e.worker(worker.Config{MaxIdleInterval: time.Minute, SignalInterval: 10 * time.Minute,
		Handler: worker.HandlerFunc(func(context.Context, *consumer.Task) error {
			ran <- time.Now()
			return nil
		})})
	require.NoError(t, w.Start(context.Background()))
	defer stop(t, w)
	require.Eventually(t, func() bool { return w.Stats().Polls > 0 }, 10*time.Second, 20*time.Millisecond)

	scheduled := time.Now()
	e.schedule(1)
	select {
	case at := <-ran:
		t.Logf("ran %v after scheduling", at.Sub(scheduled))
	case <-time.After(20 * time.Second): // far below the 48 s at least the worker would sleep
		t.Fatal("the worker did not wake for a local schedule")
	}
}

// TestLeaseExtension runs a handler for longer than its task's 2 s timeout. With
// ExtendLeases the lease is renewed and the task acked once; without, the handler's
// context ends when the lease does, and the task is delivered again.
func TestLeaseExtension(t *testing.T) {
	t.Parallel()
	for _, extend := range []bool{true, false} {
		t.Run(map[bool]string{true: "extended", false: "expiring"}[extend], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, DefaultTimeout: 2 * time.Second})
			e.schedule(1)
			type run struct {
				attempt int
				err     error
			}
			runs := make(chan run, 4)
			var takeFailed atomic.Bool
			w := e.worker(worker.Config{ExtendLeases: extend, Concurrency: 1,
				Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
					if f, ok := ev.(shardqtype.PartitionFailed); ok && f.Op == "take" {
						takeFailed.Store(true)
					}
				}),
				Backoff: func(int) time.Duration { return time.Minute }, // a failure would not come back soon
				Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
					select {
					case <-time.After(3500 * time.Millisecond): // longer than the timeout
						runs <- run{task.Attempt, nil}
						return nil
					case <-ctx.Done():
						runs <- run{task.Attempt, ctx.Err()}
						return ctx.Err()
					}
				})})
			require.NoError(t, w.Start(context.Background()))
			var first run
			select {
			case first = <-runs:
			case <-time.After(20 * time.Second):
				t.Fatal("the task never ran")
			}
			// On a busy node, a first lease may end before its handler starts: a take whose
			// swap timed out may have applied without delivering, or the take returned
			// after the 2 s lease had run out (the worker drops such a task unstarted). The
			// first run is then attempt 2.
			if first.attempt != 1 {
				require.True(t, takeFailed.Load() || w.Stats().Expired > 0,
					"first run at attempt %d, with no take failed and no lease run out unstarted", first.attempt)
			}
			if extend {
				require.NoError(t, first.err)
				require.Eventually(t, func() bool { return w.Stats().Acked == 1 }, 5*time.Second, 20*time.Millisecond)
				require.Zero(t, w.Stats().LeaseLost)
				require.Zero(t, e.remaining())
			} else {
				require.ErrorIs(t, first.err, context.Canceled, "the context ends with the lease")
				select {
				case second := <-runs:
					require.Equal(t, first.attempt+1, second.attempt, "the expired lease is delivered again")
				case <-time.After(20 * time.Second): // a retry would have waited the minute's backoff
					t.Fatal("the task did not come back when its lease ran out")
				}
				require.Zero(t, w.Stats().Retried, "a task whose lease ran out is not retried as well")
			}
			stop(t, w)
		})
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	h := worker.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })
	for field, cfg := range map[string]worker.Config{
		"Config.Handler":         {Queue: e.q.Name},
		"Config.Concurrency":     {Queue: e.q.Name, Handler: h, Concurrency: -1},
		"Config.Prefetch":        {Queue: e.q.Name, Handler: h, Prefetch: -1},
		"Config.MaxIdleInterval": {Queue: e.q.Name, Handler: h, MaxIdleInterval: -time.Second},
		"Config.BatchDelay":      {Queue: e.q.Name, Handler: h, BatchDelay: -time.Second},
		"Config.MaxAttempts":     {Queue: e.q.Name, Handler: h, MaxAttempts: -1},
		"Config.AckInterval":     {Queue: e.q.Name, Handler: h, AckInterval: -time.Second},
		"Config.Queue":           {Queue: "Not Valid", Handler: h},
	} {
		_, err := worker.New(cassandratest.Driver(e.s), cfg)
		require.ErrorIs(t, err, shardqtype.ErrInvalid, field)
		require.ErrorContains(t, err, field)
	}
	w := e.worker(worker.Config{Handler: h})
	require.Error(t, w.Stop(context.Background()), "stopping a worker never started")
	require.NoError(t, w.Start(context.Background()))
	require.Error(t, w.Start(context.Background()), "starting twice")
	stop(t, w)
}

// distinct returns ids without repeats.
func distinct(ids []uuid.UUID) map[uuid.UUID]bool {
	set := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}
