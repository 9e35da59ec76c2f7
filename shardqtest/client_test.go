package shardqtest_test

import (
	"context"
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
	in, err := inspect.New(c.Session, inspect.Config{})
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
