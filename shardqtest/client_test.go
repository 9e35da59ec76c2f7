package shardqtest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/shardqtest"
)

type welcomeArgs struct {
	To string `json:"to"`
}

func (welcomeArgs) Kind() string { return "welcome" }

// A client on the in-memory store runs tasks due now at once, holds a task due later
// until the test moves the clock past it, and snoozes by that clock too.
func TestNewClientRunsOnTheClockOfTheTest(t *testing.T) {
	t.Parallel()
	got := make(chan *shardq.Task[welcomeArgs], 10)
	snoozed := false
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[welcomeArgs]) error {
		got <- task
		if task.Args.To == "snooze" && !snoozed {
			snoozed = true
			return shardq.Snooze(time.Minute)
		}
		return nil
	})
	c := shardqtest.NewClient(t, shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}})
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))

	_, err := c.Insert(ctx, welcomeArgs{To: "now"}, nil)
	require.NoError(t, err)
	require.Equal(t, "now", receive(t, got).Args.To)

	later, err := c.Insert(ctx, welcomeArgs{To: "later"}, &shardq.InsertOpts{DueAt: c.Clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	in, err := inspect.New(c.Driver, inspect.Config{})
	require.NoError(t, err)
	info, err := in.Task(ctx, later.ID)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskScheduled, info.State)
	require.Equal(t, "welcome", info.Kind)
	c.Clock.Advance(time.Hour)
	require.Equal(t, "later", receive(t, got).Args.To)

	_, err = c.Insert(ctx, welcomeArgs{To: "snooze"}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, receive(t, got).Attempt)
	c.Clock.Advance(time.Minute)
	again := receive(t, got)
	require.Equal(t, "snooze", again.Args.To)
	require.Equal(t, 1, again.Attempt, "a snooze is not an attempt")
}

func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("nothing received within 30 s")
		panic("unreachable")
	}
}

type slowArgs struct{}

func (slowArgs) Kind() string { return "slow" }

type fastArgs struct{}

func (fastArgs) Kind() string { return "fast" }

// Queues sharing a client's Concurrency lease no task ahead of their own handlers: a
// queue with one busy handler holds one slot, and another queue's task starts at once on
// the slots left.
func TestNewClientPooledQueueLeasesNoMoreThanItsHandlers(t *testing.T) {
	t.Parallel()
	release, fastRan := make(chan struct{}), make(chan struct{}, 1)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, _ *shardq.Task[slowArgs]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	shardq.AddWorkerFunc(workers, func(context.Context, *shardq.Task[fastArgs]) error {
		fastRan <- struct{}{}
		return nil
	})
	var slowLeased atomic.Int64
	slowStarted := make(chan struct{}, 6)
	c := shardqtest.NewClient(t, shardq.Config{Workers: workers, Concurrency: 3,
		Queues: map[string]shardq.Queue{"slow": {Concurrency: 1}, "fast": {Concurrency: 2}},
		Observer: shardq.ObserverFunc(func(_ context.Context, e shardq.Event) {
			switch e := e.(type) {
			case shardq.BatchAcquired:
				if e.Queue == "slow" {
					slowLeased.Add(int64(e.Size))
				}
			case shardq.TaskStarted:
				if e.Queue == "slow" {
					slowStarted <- struct{}{}
				}
			}
		})})
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	defer close(release)
	params := make([]shardq.InsertManyParams, 6)
	for i := range params {
		params[i] = shardq.InsertManyParams{Args: slowArgs{}, Opts: &shardq.InsertOpts{Queue: "slow"}}
	}
	_, err := c.InsertMany(ctx, params)
	require.NoError(t, err)
	receive(t, slowStarted)

	_, err = c.Insert(ctx, fastArgs{}, &shardq.InsertOpts{Queue: "fast"})
	require.NoError(t, err)
	receive(t, fastRan)
	require.Equal(t, int64(1), slowLeased.Load(), "slow leased tasks ahead of its one busy handler")
}
