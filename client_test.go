package shardq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/worker"
)

type emailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (emailArgs) Kind() string { return "email" }

type resizeArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (resizeArgs) Kind() string { return "resize" }

// Every resize goes to the images queue at priority 3 unless its insert says otherwise.
func (resizeArgs) InsertOpts() shardq.InsertOpts {
	return shardq.InsertOpts{Queue: "images", Priority: 3}
}

type orphanArgs struct{}

func (orphanArgs) Kind() string { return "orphan" }

// waitFor bounds every wait on a signal: generous, as three nodes on two cores answer slowly.
const waitFor = 3 * time.Minute

// receive returns the next value from ch, failing the test after waitFor.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("no %s within %v", what, waitFor)
		panic("unreachable")
	}
}

// events passes on the client's events of type E.
func events[E shardq.Event](ch chan<- E) shardq.Observer {
	return shardq.ObserverFunc(func(_ context.Context, e shardq.Event) {
		if e, ok := e.(E); ok {
			ch <- e
		}
	})
}

// startClient starts a client on session and stops it when the test ends.
func startClient(t *testing.T, c *shardq.Client) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	})
}

// One client works two queues, each kind's worker gets its args decoded, and a kind's
// own options place its tasks unless the insert says otherwise.
func TestClientRunsKindsOnManyQueues(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	emails, resizes := make(chan *shardq.Task[emailArgs], 10), make(chan *shardq.Task[resizeArgs], 10)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[emailArgs]) error {
		emails <- task
		return nil
	})
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[resizeArgs]) error {
		resizes <- task
		return nil
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers,
		Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}, "images": {Concurrency: 2}}})
	require.NoError(t, err)
	startClient(t, c)

	ctx := context.Background()
	res, err := c.Insert(ctx, emailArgs{To: "alice@example.com", Subject: "welcome"},
		&shardq.InsertOpts{Headers: map[string]string{"trace": "t1"}})
	require.NoError(t, err)
	require.Equal(t, shardq.DefaultQueue, res.Queue)
	require.Equal(t, "email", res.Kind)
	require.NotEqual(t, uuid.Nil, res.ID)

	many, err := c.InsertMany(ctx, []shardq.InsertManyParams{
		{Args: resizeArgs{Image: "a.png", Width: 100}},
		{Args: resizeArgs{Image: "b.png", Width: 200}, Opts: &shardq.InsertOpts{Priority: 7}},
	})
	require.NoError(t, err)
	require.Len(t, many, 2)
	require.Equal(t, "images", many[0].Queue)
	require.Equal(t, 3, many[0].Priority, "the kind's priority")
	require.Equal(t, 7, many[1].Priority, "the insert's wins")

	email := receive(t, emails, "email")
	require.Equal(t, emailArgs{To: "alice@example.com", Subject: "welcome"}, email.Args)
	require.Equal(t, res.ID, email.ID)
	require.Equal(t, "email", email.Kind)
	require.GreaterOrEqual(t, email.Attempt, 1) // 2 when a first delivery's outcome stayed unknown
	require.Equal(t, shardq.DefaultMaxAttempts, email.MaxAttempts)
	require.Equal(t, map[string]string{"trace": "t1"}, email.Headers, "the library's own headers are not shown")

	got := map[string]*shardq.Task[resizeArgs]{}
	for range 2 {
		r := receive(t, resizes, "resize")
		got[r.Args.Image] = r
	}
	require.Equal(t, resizeArgs{Image: "a.png", Width: 100}, got["a.png"].Args)
	require.Equal(t, "images", got["b.png"].Queue)
	require.Equal(t, 7, got["b.png"].Priority)
}

// A task whose kind no worker runs is not dropped: it fails with an error naming the
// kind, is retried, and is dead-lettered with that error once its attempts are used up.
func TestClientUnknownKindIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	retried, dead := make(chan shardq.Retried, 10), make(chan shardq.DeadLettered, 10)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(context.Context, *shardq.Task[emailArgs]) error { return nil })
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}},
		Backoff: func(int) time.Duration { return 0 },
		Observer: shardq.ObserverFunc(func(ctx context.Context, e shardq.Event) {
			events(retried).Observe(ctx, e)
			events(dead).Observe(ctx, e)
		})})
	require.NoError(t, err)
	startClient(t, c)

	res, err := c.Insert(context.Background(), orphanArgs{}, &shardq.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	r := receive(t, retried, "retry")
	require.Equal(t, res.ID, r.TaskID)
	require.ErrorIs(t, r.Err, shardq.ErrUnknownKind)
	d := receive(t, dead, "dead letter")
	require.Equal(t, res.ID, d.TaskID)
	require.Equal(t, 2, d.Attempt, "the insert's MaxAttempts")
	var unknown *shardq.UnknownKindError
	require.ErrorAs(t, d.Err, &unknown)
	require.Equal(t, "orphan", unknown.Kind)

	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	letters, err := in.DeadLetters(context.Background(), shardq.DefaultQueue, inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, res.ID, letters[0].ID)
	require.Contains(t, letters[0].LastError, `no worker is registered for kind "orphan"`)
	require.Equal(t, "orphan", letters[0].Kind)
}

// A snoozed delivery does not count as an attempt; Cancel dead-letters at once, whatever
// attempts are left.
func TestClientSnoozeAndCancel(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	attempts := make(chan int, 10)
	dead := make(chan shardq.DeadLettered, 10)
	var mu sync.Mutex
	deliveries := map[string]int{}
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[emailArgs]) error {
		mu.Lock()
		deliveries[task.Args.To]++
		n := deliveries[task.Args.To]
		mu.Unlock()
		switch task.Args.To {
		case "snooze":
			attempts <- task.Attempt
			if n < 3 {
				return shardq.Snooze(0)
			}
			return nil
		default:
			return shardq.Cancel(errors.New("no such mailbox"))
		}
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}},
		Observer: events(dead)})
	require.NoError(t, err)
	startClient(t, c)

	ctx := context.Background()
	_, err = c.Insert(ctx, emailArgs{To: "snooze"}, &shardq.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	for range 3 {
		require.Equal(t, 1, receive(t, attempts, "delivery"), "snoozes are not attempts, so MaxAttempts 1 allows them")
	}

	res, err := c.Insert(ctx, emailArgs{To: "cancel"}, nil)
	require.NoError(t, err)
	d := receive(t, dead, "dead letter")
	require.Equal(t, res.ID, d.TaskID)
	require.Equal(t, 1, d.Attempt)
	var cancelled *shardq.CancelError
	require.ErrorAs(t, d.Err, &cancelled)
	require.EqualError(t, cancelled.Err, "no such mailbox")
	select {
	case d := <-dead:
		t.Fatalf("a second dead letter: %+v", d)
	default:
	}
}

// Stop lets running workers finish and acks what they finished.
func TestClientStopAcksWhatFinished(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: shardq.DefaultQueue, CompletedRetention: time.Hour})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(context.Context, *shardq.Task[emailArgs]) error {
		close(started)
		<-release
		return nil
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	res, err := c.Insert(ctx, emailArgs{To: "bob"}, nil)
	require.NoError(t, err)
	receive(t, started, "start")

	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while a worker ran: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, receive(t, stopped, "stop"))
	require.NoError(t, c.Stop(ctx), "a second Stop")

	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	info, err := in.Task(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskCompleted, info.State)
}

// StopAndCancel ends running workers' contexts at once; their tasks are not acked.
func TestClientStopAndCancel(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	started := make(chan struct{})
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, _ *shardq.Task[emailArgs]) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	res, err := c.Insert(ctx, emailArgs{To: "carol"}, nil)
	require.NoError(t, err)
	receive(t, started, "start")
	sctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	require.NoError(t, c.StopAndCancel(sctx))

	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	info, err := in.Task(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskInFlight, info.State, "it comes back after its timeout")
}

// An insert-only client needs no workers, and bad input names its field.
func TestClientValidation(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	_, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Queues: map[string]shardq.Queue{"q": {}}})
	requireInvalid(t, err, "Config.Workers")
	_, err = shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: shardq.NewWorkers(), Queues: map[string]shardq.Queue{"Bad Name": {}}})
	requireInvalid(t, err, "Config.Queues")
	_, err = shardq.NewClient(nil, shardq.Config{})
	requireInvalid(t, err, "driver")

	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()), "an insert-only client starts")
	ctx := context.Background()
	_, err = c.Insert(ctx, emailArgs{}, &shardq.InsertOpts{Headers: map[string]string{"shardq-snoozes": "x"}})
	requireInvalid(t, err, "params[0].Opts.Headers")
	_, err = c.Insert(ctx, nil, nil)
	requireInvalid(t, err, "params[0].Args")
	_, err = c.Insert(ctx, emailArgs{}, &shardq.InsertOpts{MaxAttempts: -1})
	requireInvalid(t, err, "params[0].Opts.MaxAttempts")
	_, err = c.Insert(ctx, emailArgs{}, &shardq.InsertOpts{Queue: "missing"})
	require.ErrorIs(t, err, shardq.ErrQueueNotFound)
	require.NoError(t, c.Stop(ctx))

	require.PanicsWithValue(t, `shardq: AddWorker: kind "email" has a worker already`, func() {
		w := shardq.NewWorkers()
		shardq.AddWorkerFunc(w, func(context.Context, *shardq.Task[emailArgs]) error { return nil })
		shardq.AddWorkerFunc(w, func(context.Context, *shardq.Task[emailArgs]) error { return nil })
	})
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var v *shardq.ValidationError
	require.ErrorAs(t, err, &v)
	require.Equal(t, field, v.Field)
	require.ErrorIs(t, err, shardq.ErrInvalid)
}

type rankArgs struct {
	N int `json:"n"`
}

func (rankArgs) Kind() string { return "rank" }

// Three queues sharing two handlers in strict order: the lower queues wait only while a
// higher one has tasks due, and every task runs.
func TestClientStrictQueueOrder(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	const perQueue = 12
	queues := []string{"high", "mid", "low"}
	var mu sync.Mutex
	started := map[string]int{}
	var atFirst []map[string]int // started counts when each queue's first task started
	all := make(chan struct{})
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[rankArgs]) error {
		mu.Lock()
		if started[task.Queue] == 0 {
			atFirst = append(atFirst, map[string]int{"queue": len(atFirst), queues[0]: started[queues[0]],
				queues[1]: started[queues[1]], queues[2]: started[queues[2]]})
			atFirst[len(atFirst)-1][task.Queue] = -1
		}
		started[task.Queue]++
		if started["high"]+started["mid"]+started["low"] == 3*perQueue {
			close(all)
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the work
		return nil
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Concurrency: 2, QueueOrder: shardq.QueueStrict,
		Queues: map[string]shardq.Queue{"high": {Weight: 3}, "mid": {Weight: 2}, "low": {Weight: 1}}})
	require.NoError(t, err)
	for _, q := range queues {
		_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: q})
		require.NoError(t, err)
		params := make([]shardq.InsertManyParams, perQueue)
		for i := range params {
			params[i] = shardq.InsertManyParams{Args: rankArgs{N: i}, Opts: &shardq.InsertOpts{Queue: q}}
		}
		_, err = c.InsertMany(ctx, params)
		require.NoError(t, err)
	}
	startClient(t, c)
	receive(t, all, "every task")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, atFirst, 3)
	// When mid's first task started, high had at most the two shared handlers' worth left.
	mid, low := atFirst[1], atFirst[2]
	require.Equal(t, -1, mid["mid"], "mid started second: %v", atFirst)
	require.GreaterOrEqual(t, mid["high"], perQueue-2, "%v", atFirst)
	require.Equal(t, -1, low["low"], "low started last: %v", atFirst)
	require.Equal(t, perQueue, low["high"], "%v", atFirst)
	require.GreaterOrEqual(t, low["mid"], perQueue-2, "%v", atFirst)
}

// signalReads counts the reads of wake-up signals a session sends: of several queues'
// cells at once (the client's), of their slots alone (a sweep's read apart from the
// cells'), and of one queue's cells (a consumer's, or a worker's of its own).
type signalReads struct{ many, withSlots, slotsApart, one atomic.Int64 }

func (r *signalReads) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	st := q.Statement
	switch {
	case !strings.HasPrefix(st, "SELECT") || !strings.Contains(st, "FROM queue_signals"):
	case strings.Contains(st, "queue IN") && !strings.Contains(st, "shards"):
		r.slotsApart.Add(1)
	case strings.Contains(st, "queue IN"):
		r.many.Add(1)
		if strings.Contains(st, "slots") {
			r.withSlots.Add(1)
		}
	case strings.Contains(st, "shards FROM"):
		r.one.Add(1)
	}
}

// An idle client reads the wake-up signals of all its queues in one request per interval,
// which also serves its sweeps and lookbacks when they are due.
// (TestClientWakesForATaskDueNowBehindALaterOne shows a task of another process waking it.)
func TestClientReadsSignalsOnceForAllQueues(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	reads := &signalReads{}
	s := cassandratest.SessionFor(t, ks, func(c *gocql.ClusterConfig) { c.QueryObserver = reads })
	ctx := context.Background()
	queues := map[string]shardq.Queue{}
	for i := range 5 {
		name := fmt.Sprintf("q%d", i)
		queues[name] = shardq.Queue{}
		_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: name})
		require.NoError(t, err)
	}
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(context.Context, *shardq.Task[emailArgs]) error { return nil })
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: queues})
	require.NoError(t, err)
	startClient(t, c)

	// Idle for a while: each worker polls once at start, then waits up to 10 s.
	time.Sleep(2 * time.Second)
	many, one := reads.many.Load(), reads.one.Load()
	window := 4 * time.Second
	time.Sleep(window)
	many, one = reads.many.Load()-many, reads.one.Load()-one
	intervals := int64(window / worker.DefaultSignalInterval)
	require.Positive(t, many, "the client reads the signals")
	require.LessOrEqual(t, many, intervals+3, "one read per interval for all five queues, at most")
	require.Positive(t, reads.withSlots.Load(), "the sweeps' slots are read")
	require.Zero(t, reads.slotsApart.Load(), "the sweeps' slots come with the cells, in the same requests")
	// Each queue's consumer reads its cells at its own polls, every 8-10 s when idle:
	// reading them every interval would be 5 x 16.
	require.LessOrEqual(t, one, int64(5*2*2), "no queue's worker reads its signals every interval")
}

// Another process schedules X for now, then Y due later in the same bucket and shard,
// between two reads of the client's signals: the shard's signal entry keeps the time of
// the last touch only (Y's), and X must not wait for it, nor for the next idle poll.
func TestClientWakesForATaskDueNowBehindALaterOne(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	ctx := context.Background()
	_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "q", ShardCount: 1})
	require.NoError(t, err)
	ran := make(chan string, 4)
	inserted := make(chan time.Time, 1)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[emailArgs]) error {
		ran <- task.Args.To
		return nil
	})
	// Start just before a bucket begins: the first poll is then, the next 8-10 s later.
	const bucket = shardq.DefaultBucketDuration
	time.Sleep(time.Until(time.Now().Truncate(bucket).Add(bucket - 500*time.Millisecond)))
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{"q": {}}})
	require.NoError(t, err)
	startClient(t, c)
	time.Sleep(time.Until(time.Now().Truncate(bucket).Add(bucket + 200*time.Millisecond)))

	other, err := shardq.NewClient(cassandratest.Driver(cassandratest.SessionFor(t, ks)), shardq.Config{})
	require.NoError(t, err)
	at := time.Now()
	_, err = other.Insert(ctx, emailArgs{To: "x"}, &shardq.InsertOpts{Queue: "q"})
	require.NoError(t, err)
	_, err = other.Insert(ctx, emailArgs{To: "y"}, &shardq.InsertOpts{Queue: "q", DueAt: at.Truncate(bucket).Add(bucket - 100*time.Millisecond)})
	require.NoError(t, err)
	inserted <- at
	require.Equal(t, "x", receive(t, ran, "the task due now"))
	// The client's next idle poll comes 8-10 s after its first, which was 0.7 s before the
	// insert: at least 7.3 s after it, and Y is due later still. At RF 3 on two cores the
	// wake took 6.1 s.
	require.Less(t, time.Since(<-inserted), 7*time.Second, "woken by the signal, not the next poll or the later task's time")
}

// A series whose occurrences have a kind is run by the client's worker of that kind.
func TestClientRunsSeriesOfAKind(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	got := make(chan *shardq.Task[emailArgs], 1)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[emailArgs]) error {
		got <- task
		return nil
	})
	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}})
	require.NoError(t, err)
	startClient(t, c)
	sc, err := series.New(cassandratest.Driver(s), series.Config{})
	require.NoError(t, err)
	payload, err := json.Marshal(emailArgs{To: "weekly@example.com", Subject: "digest"})
	require.NoError(t, err)
	_, err = sc.Create(ctx, series.Series{Queue: shardq.DefaultQueue, Name: "digest", Every: time.Hour, Start: time.Now().Add(2 * time.Second).Truncate(time.Millisecond),
		Kind: emailArgs{}.Kind(), Payload: payload})
	require.NoError(t, err)
	task := receive(t, got, "the first occurrence")
	require.Equal(t, "weekly@example.com", task.Args.To)
	require.Equal(t, "email", task.Kind)
}
