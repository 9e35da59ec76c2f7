package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// A task's headers go wherever the task goes: the inspector shows them while it waits,
// after a Reschedule and in its dead letter; its handler gets them on every attempt
// (each retry moves its marker) and again after the letter is replayed. A task scheduled
// without headers has none anywhere.
func TestHeadersKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 2})
	ctx := context.Background()
	headers := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "ácme"}
	id, err := e.p.ScheduleTask(ctx, producer.Task{Queue: e.q.Name, Payload: []byte("p"), Headers: headers,
		DueAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	bare, err := e.p.ScheduleTask(ctx, producer.Task{Queue: e.q.Name, Payload: []byte("bare"), DueAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	in, err := inspect.New(cassandratest.Driver(e.s), inspect.Config{})
	require.NoError(t, err)
	info, err := in.Task(ctx, id)
	require.NoError(t, err)
	require.Equal(t, headers, info.Headers)
	require.NoError(t, e.p.Reschedule(ctx, id, producer.RescheduleOptions{DueAt: time.Now()}))
	require.NoError(t, e.p.Reschedule(ctx, bare, producer.RescheduleOptions{DueAt: time.Now()}))
	info, err = in.Task(ctx, id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, info.State)
	require.Equal(t, headers, info.Headers, "kept by a reschedule")

	type run struct {
		payload string
		attempt int
		headers map[string]string
	}
	runs := make(chan run, 16)
	dead := make(chan struct{})
	var fixed atomic.Bool
	w := e.worker(worker.Config{
		MaxAttempts: 3,
		Backoff:     func(int) time.Duration { return 0 },
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if _, ok := ev.(shardqtype.DeadLettered); ok {
				close(dead)
			}
		}),
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			runs <- run{string(task.Payload), task.Attempt, task.Headers}
			if string(task.Payload) == "bare" || fixed.Load() {
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
	attempts := 0
	for range 4 {
		r := <-runs
		if r.payload == "bare" {
			require.Nil(t, r.headers, "a task without headers has none")
			continue
		}
		attempts++
		require.Equal(t, attempts, r.attempt)
		require.Equal(t, headers, r.headers, "attempt %d", r.attempt)
	}

	letters, err := in.DeadLetters(ctx, e.q.Name, inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	require.Equal(t, id, letters[0].ID)
	require.Equal(t, headers, letters[0].Headers, "kept in the dead letter")

	fixed.Store(true)
	_, err = e.p.ReplayDeadLetter(ctx, e.q.Name, letters[0].DeadLetterID)
	require.NoError(t, err)
	select {
	case r := <-runs:
		require.Equal(t, run{"p", 1, headers}, r, "kept by the replay")
	case <-time.After(30 * time.Second):
		t.Fatal("the replayed task never ran")
	}
}
