package shardqtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtest"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

func TestNewTaskIsAFirstDelivery(t *testing.T) {
	t.Parallel()
	before := time.Now()
	task := shardqtest.NewTask("emails", []byte("hi"))
	after := time.Now()

	require.NotEqual(t, uuid.Nil, task.ID)
	require.Equal(t, "emails", task.Queue)
	require.Equal(t, []byte("hi"), task.Payload)
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, int64(1), task.Token)
	require.Equal(t, shardqtype.DefaultTimeout, task.Timeout)
	require.WithinRange(t, task.DueAt, before.Truncate(time.Millisecond), after)
	require.WithinRange(t, task.Deadline, before.Add(shardqtype.DefaultTimeout), after.Add(shardqtype.DefaultTimeout))
	// IDs carry their queue's hint, as a producer's do, so a lookup by ID finds the queue.
	require.Equal(t, taskid.HintOf("emails"), taskid.Hint(task.ID))
	require.NotEqual(t, task.ID, shardqtest.NewTask("emails", nil).ID)
}

func TestWorkRunsTheHandlerOnTheTask(t *testing.T) {
	t.Parallel()
	failed := errors.New("smtp: 451 try later")
	task := shardqtest.NewTask("emails", []byte("alice"))
	task.Attempt = 3
	var got *consumer.Task
	var deadline time.Time
	h := worker.HandlerFunc(func(ctx context.Context, tk *consumer.Task) error {
		got = tk
		deadline, _ = ctx.Deadline()
		return failed
	})

	err := shardqtest.Work(t.Context(), h, task)
	require.ErrorIs(t, err, failed)
	require.Same(t, task, got)
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, task.Deadline, deadline, "the handler's context ends with the lease")

	require.NoError(t, shardqtest.Work(t.Context(), worker.HandlerFunc(func(context.Context, *consumer.Task) error {
		return nil
	}), task))
}

func TestWorkEndsTheHandlersContextAtTheDeadline(t *testing.T) {
	t.Parallel()
	task := shardqtest.NewTask("emails", nil)
	task.Deadline = time.Now().Add(50 * time.Millisecond)
	h := worker.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("the context outlived the lease")
		}
	})
	require.ErrorIs(t, shardqtest.Work(t.Context(), h, task), context.DeadlineExceeded)
}

func TestWorkRefusesWhatAWorkerWouldNotRun(t *testing.T) {
	t.Parallel()
	called := false
	h := worker.HandlerFunc(func(context.Context, *consumer.Task) error {
		called = true
		return nil
	})
	expired := shardqtest.NewTask("emails", nil)
	expired.Deadline = time.Now().Add(-time.Second)
	for name, call := range map[string]func() error{
		"nil handler": func() error { return shardqtest.Work(t.Context(), nil, shardqtest.NewTask("emails", nil)) },
		"nil task":    func() error { return shardqtest.Work(t.Context(), h, nil) },
		"no deadline": func() error { return shardqtest.Work(t.Context(), h, &consumer.Task{Queue: "emails"}) },
		"lease over":  func() error { return shardqtest.Work(t.Context(), h, expired) },
	} {
		var verr *shardqtype.ValidationError
		require.ErrorAs(t, call(), &verr, name)
		require.ErrorIs(t, verr, shardqtype.ErrInvalid, name)
	}
	require.False(t, called)
}

func TestPanicsInTheHandlerAreNotHidden(t *testing.T) {
	t.Parallel()
	h := worker.HandlerFunc(func(context.Context, *consumer.Task) error { panic("bad payload") })
	require.PanicsWithValue(t, "bad payload", func() {
		_ = shardqtest.Work(t.Context(), h, shardqtest.NewTask("emails", nil))
	})
}

// newQueue makes a queue with a short ring, so reading all its partitions is quick.
func newQueue(t *testing.T, s *shardqtype.Driver, name string) {
	t.Helper()
	_, err := shardq.CreateQueue(t.Context(), s, shardqtype.QueueConfig{Name: name, BucketCount: 12, ShardCount: 2})
	require.NoError(t, err)
}

func TestAConsumerRefusesAnInMemoryTask(t *testing.T) {
	t.Parallel()
	s := shardqtest.Driver(t)
	newQueue(t, s, "emails")
	c, err := consumer.New(s, consumer.Config{Queue: "emails"})
	require.NoError(t, err)
	ctx := t.Context()
	task := shardqtest.NewTask("emails", []byte("x"))

	for name, err := range map[string]error{
		"ack":         c.AckTasks(ctx, task),
		"extend":      c.Extend(ctx, task, time.Minute),
		"retry":       c.Retry(ctx, task, 0),
		"dead letter": c.DeadLetter(ctx, task, errors.New("boom")),
	} {
		require.ErrorIs(t, err, shardqtype.ErrInvalid, name)
	}
	in, err := inspect.New(s, inspect.Config{})
	require.NoError(t, err)
	letters, err := in.DeadLetters(ctx, "emails", inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Empty(t, letters, "nothing was written")
}

func TestSessionsAreTheTestsOwn(t *testing.T) {
	t.Parallel()
	a, b := shardqtest.Driver(t), shardqtest.Driver(t)
	require.NotEqual(t, keyspaceOf(t, a), keyspaceOf(t, b))
	// Both hold shardq's schema and no queue.
	for _, s := range []*shardqtype.Driver{a, b} {
		_, err := shardq.LoadQueue(t.Context(), s, "emails")
		require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
		newQueue(t, s, "emails")
	}
}

// keyspaceOf returns the keyspace s is bound to.
func keyspaceOf(t *testing.T, s *shardqtype.Driver) string {
	t.Helper()
	ks := s.Session().Keyspace()
	require.NotEmpty(t, ks)
	return ks
}

func schedule(t *testing.T, p *producer.Producer, tasks ...producer.Task) []uuid.UUID {
	t.Helper()
	ids, err := p.ScheduleTasks(t.Context(), tasks)
	require.NoError(t, err)
	return ids
}

func TestRequireScheduledFindsATask(t *testing.T) {
	t.Parallel()
	s := shardqtest.Driver(t)
	newQueue(t, s, "emails")
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	later := time.Now().Add(time.Hour)
	ids := schedule(t, p,
		producer.Task{Queue: "emails", Payload: []byte("welcome"), Key: "welcome:42", DueAt: later, Priority: 5},
		producer.Task{Queue: "emails", Payload: []byte("digest")},
	)
	ctx := t.Context()

	got := shardqtest.RequireScheduled(ctx, t, s, "emails", shardqtest.Match{Key: "welcome:42"})
	require.Equal(t, ids[0], got.ID)
	require.Equal(t, shardqtype.TaskScheduled, got.State)
	require.Equal(t, 5, got.Priority)
	require.Equal(t, []byte("welcome"), got.Payload)

	got = shardqtest.RequireScheduled(ctx, t, s, "emails", shardqtest.Match{Payload: []byte("digest")})
	require.Equal(t, ids[1], got.ID)
	got = shardqtest.RequireScheduled(ctx, t, s, "emails", shardqtest.Match{DueAt: later.Add(500 * time.Millisecond)})
	require.Equal(t, ids[0], got.ID)
	got = shardqtest.RequireScheduled(ctx, t, s, "emails", shardqtest.Match{
		Where: func(i *shardqtype.TaskInfo) bool { return i.Priority == 0 },
	})
	require.Equal(t, ids[1], got.ID)

	many := shardqtest.RequireScheduledMany(ctx, t, s, "emails",
		shardqtest.Match{Payload: []byte("digest")}, shardqtest.Match{Key: "welcome:42"})
	require.Equal(t, []uuid.UUID{ids[1], ids[0]}, []uuid.UUID{many[0].ID, many[1].ID})
}

// A match that fits every task must not take the one task a narrower match needs.
func TestRequireScheduledManyPairsBroadAndNarrowMatches(t *testing.T) {
	t.Parallel()
	s := shardqtest.Driver(t)
	newQueue(t, s, "emails")
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	ids := schedule(t, p,
		producer.Task{Queue: "emails", Payload: []byte("a")},
		producer.Task{Queue: "emails", Payload: []byte("b")},
	)
	for _, order := range [][]uuid.UUID{ids, {ids[1], ids[0]}} {
		narrow := order[0]
		got := shardqtest.RequireScheduledMany(t.Context(), t, s, "emails",
			shardqtest.Match{}, // any
			shardqtest.Match{Where: func(i *shardqtype.TaskInfo) bool { return i.ID == narrow }},
		)
		require.Equal(t, narrow, got[1].ID)
		require.Equal(t, order[1], got[0].ID)
	}
}

// recorder stands in for a test that the Require functions should fail: it keeps the
// message and ends the goroutine, as t.Fatalf does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a recorder and returns the message it failed with.
func failure(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	require.NotEmpty(t, r.msg, "the call did not fail the test")
	return r.msg
}

func TestRequireScheduledFailuresListTheQueue(t *testing.T) {
	t.Parallel()
	s := shardqtest.Driver(t)
	newQueue(t, s, "emails")
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	ctx := t.Context()

	msg := failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduled(ctx, tb, s, "emails", shardqtest.Match{Key: "welcome:42"})
	})
	require.Equal(t, `shardqtest: no scheduled task of queue "emails" matches {key "welcome:42"}; the queue holds no task`, msg)

	ids := schedule(t, p,
		producer.Task{Queue: "emails", Payload: []byte(`{"to":"bob"}`), Key: "welcome:43"},
		producer.Task{Queue: "emails", Payload: []byte(`{"to":"carol"}`), Priority: 7},
	)
	msg = failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduled(ctx, tb, s, "emails", shardqtest.Match{Key: "welcome:42"})
	})
	require.Contains(t, msg, `no scheduled task of queue "emails" matches {key "welcome:42"}; the queue holds 2 tasks:`)
	require.Contains(t, msg, ids[0].String()+"  scheduled  due ")
	require.Contains(t, msg, `priority 0  attempt 0  key "welcome:43"  payload "{\"to\":\"bob\"}"`)
	require.Contains(t, msg, `priority 7  attempt 0  payload "{\"to\":\"carol\"}"`)

	msg = failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduled(ctx, tb, s, "emails", shardqtest.Match{})
	})
	require.Contains(t, msg, `2 scheduled tasks of queue "emails" match {any}, want 1;`)

	msg = failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduledMany(ctx, tb, s, "emails",
			shardqtest.Match{Payload: []byte(`{"to":"bob"}`)}, shardqtest.Match{Payload: []byte("dave")})
	})
	require.Contains(t, msg, `want 2 scheduled tasks of queue "emails", one per match: no task left for ms[1] {payload "dave"}; no match for scheduled `+ids[1].String()+`;`)

	msg = failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduledMany(ctx, tb, s, "emails")
	})
	require.Contains(t, msg, "want 0 scheduled tasks")

	msg = failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduled(ctx, tb, s, "sms", shardqtest.Match{})
	})
	require.Contains(t, msg, `shardqtest: reading the tasks of queue "sms": `+shardqtype.ErrQueueNotFound.Error())
}

// A task a worker took is listed as in flight, not matched as scheduled.
func TestRequireScheduledSeesTasksInFlight(t *testing.T) {
	t.Parallel()
	s := shardqtest.Driver(t)
	newQueue(t, s, "emails")
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	ids := schedule(t, p, producer.Task{Queue: "emails", Payload: []byte("now")},
		producer.Task{Queue: "emails", Payload: []byte("later"), DueAt: time.Now().Add(time.Hour)})
	c, err := consumer.New(s, consumer.Config{Queue: "emails"})
	require.NoError(t, err)
	// A task due now is visible at once, but the consumer may start with another shard.
	var taken []*consumer.Task
	for deadline := time.Now().Add(10 * time.Second); len(taken) == 0; {
		require.True(t, time.Now().Before(deadline), "the due task was never acquired")
		got, err := c.AcquireTasks(t.Context(), 10)
		require.NoError(t, err)
		taken = append(taken, got...)
	}
	require.Len(t, taken, 1)
	require.Equal(t, ids[0], taken[0].ID)

	ctx := t.Context()
	got := shardqtest.RequireScheduledMany(ctx, t, s, "emails", shardqtest.Match{Payload: []byte("later")})
	require.Equal(t, ids[1], got[0].ID)
	msg := failure(t, func(tb testing.TB) {
		shardqtest.RequireScheduled(ctx, tb, s, "emails", shardqtest.Match{Payload: []byte("now")})
	})
	require.Contains(t, msg, ids[0].String()+"  in_flight  due ")

	require.NoError(t, c.AckTasks(ctx, taken...))
	shardqtest.RequireScheduledMany(ctx, t, s, "emails", shardqtest.Match{Payload: []byte("later")})
}
