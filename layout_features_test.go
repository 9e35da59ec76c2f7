package shardq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
)

// What was written under a queue's first layout keeps working once a new one took
// effect, and what is written after goes to the new one: unique keys hold, tasks are
// found, cancelled and rescheduled (into the new layout), a task leased before it is
// retried into the new layout, a dead letter is replayed, a series goes on, inspect sees
// both layouts, and tokens keep growing.
func TestLayoutChangeKeepsFeatures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "q", ShardCount: 2, BucketCount: 60, BucketDuration: time.Second,
		DefaultTimeout: 3 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	sc, err := series.New(cassandratest.Driver(s), series.Config{})
	require.NoError(t, err)

	later := time.Now().Add(time.Hour)
	ids, err := p.ScheduleTasks(ctx, []producer.Task{
		{Queue: q.Name, DueAt: later, Payload: []byte("stays")},
		{Queue: q.Name, DueAt: later, Key: "k"},
		{Queue: q.Name, DueAt: later, Payload: []byte("cancelled")},
		{Queue: q.Name, DueAt: later, Payload: []byte("rescheduled")},
		{Queue: q.Name, Payload: []byte("dies")},
		{Queue: q.Name, Payload: []byte("held"), Timeout: 50 * time.Second},
	})
	require.NoError(t, err)
	stays, keyed, cancelled, rescheduled, dies, held := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	leased := map[uuid.UUID]*consumer.Task{}
	for len(leased) < 2 {
		for _, task := range acquireUntil(t, c, 2) {
			leased[task.ID] = task
		}
	}
	require.NoError(t, c.DeadLetter(ctx, leased[dies], errors.New("boom")))
	_, err = sc.Create(ctx, series.Series{Queue: q.Name, Name: "tick", Every: time.Second})
	require.NoError(t, err)

	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 3, BucketDuration: 2 * time.Second})
	require.NoError(t, err)
	// The series runs across the change.
	var ticks []*consumer.Task
	for time.Now().Before(ch.From.Add(2 * time.Second)) {
		for _, task := range acquireUntil(t, c, 1) {
			require.Equal(t, "tick", task.Series)
			ticks = append(ticks, task)
			require.NoError(t, c.AckTasks(ctx, task))
		}
	}
	require.NotEmpty(t, ticks)
	tick, err := sc.Get(ctx, q.Name, "tick")
	require.NoError(t, err)
	info, err := in.Task(ctx, tick.NextID)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q~1:"), "an occurrence after the change is written into the new layout: %s", info.PartitionKey)

	info, err = in.Task(ctx, stays)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskScheduled, info.State)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q:"), "found in the first layout: %s", info.PartitionKey)
	info, err = in.Task(ctx, held)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskInFlight, info.State)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q:"), "leased before the change: %s", info.PartitionKey)
	require.NoError(t, c.Retry(ctx, leased[held], 0))
	info, err = in.Task(ctx, held)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q~1:"), "a retry moves it into the new layout: %s", info.PartitionKey)
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Key: "k"})
	require.ErrorIs(t, err, producer.ErrDuplicate, "the key is held across the change")
	byKey, err := in.TaskByKey(ctx, q.Name, "k")
	require.NoError(t, err)
	require.Equal(t, keyed, byKey.ID)
	require.NoError(t, p.Cancel(ctx, cancelled, producer.CancelOptions{}))
	require.NoError(t, p.Reschedule(ctx, rescheduled, producer.RescheduleOptions{DueAt: time.Now()}))
	info, err = in.Task(ctx, rescheduled)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q~1:"), "moved into the new layout: %s", info.PartitionKey)
	replayed, err := p.ReplayDeadLetter(ctx, q.Name, mustDeadLetter(t, in, q.Name))
	require.NoError(t, err)
	require.Equal(t, dies, replayed)
	fresh, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("fresh")})
	require.NoError(t, err)
	info, err = in.Task(ctx, fresh)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info.PartitionKey, "q~1:"), "written into the new layout: %s", info.PartitionKey)
	st, err := in.Stats(ctx, q.Name, inspect.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, st.Shards, 3, "the picture is of the layout in force")
	require.Equal(t, 1, st.Layout.Generation)
	require.GreaterOrEqual(t, st.Total.Due+st.Total.DueAgain, 3, "rescheduled, replayed, fresh")

	// Peek merges both layouts in delivery order: seen from two hours on, the task due in
	// an hour, in the first layout, is due beside those written into the new one.
	future, err := inspect.New(cassandratest.Driver(s), inspect.Config{Clock: testclock.New(time.Now().Add(2 * time.Hour))})
	require.NoError(t, err)
	peeked, err := future.Peek(ctx, q.Name, inspect.MaxPeek)
	require.NoError(t, err)
	require.Empty(t, peeked.Failed)
	peekedAt := map[uuid.UUID]string{}
	for _, ti := range peeked.Tasks {
		peekedAt[ti.ID] = ti.PartitionKey
	}
	require.True(t, strings.HasPrefix(peekedAt[stays], "q:"), "peeked in the first layout: %q", peekedAt[stays])
	require.True(t, strings.HasPrefix(peekedAt[fresh], "q~1:"), "peeked in the new layout: %q", peekedAt[fresh])

	want := map[uuid.UUID]bool{rescheduled: true, dies: true, fresh: true, held: true}
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 {
		require.True(t, time.Now().Before(deadline), "not delivered: %v", want)
		for _, task := range acquireUntil(t, c, 10) {
			if task.Series == "" {
				require.True(t, want[task.ID], "%s delivered", task.ID)
				delete(want, task.ID)
				if task.ID == dies || task.ID == held {
					require.Greater(t, task.Token, int64(1), "the token goes on from the delivery before the change")
				}
			}
			require.NoError(t, c.AckTasks(ctx, task))
		}
	}
	_, err = in.Task(ctx, cancelled)
	require.ErrorIs(t, err, shardq.ErrTaskNotFound)
	info, err = in.Task(ctx, stays)
	require.NoError(t, err)
	require.Equal(t, shardq.TaskScheduled, info.State, "a task due later stays in the first layout, which is read until it is empty")
}

// acquireUntil acquires up to n tasks, waiting up to 10 s for at least one.
func acquireUntil(t *testing.T, c *consumer.Consumer, n int) []*consumer.Task {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, err := c.AcquireTasks(context.Background(), n)
		require.NoError(t, err)
		if len(got) > 0 {
			return got
		}
	}
	require.FailNow(t, "no task in 10 s")
	return nil
}

func mustDeadLetter(t *testing.T, in *inspect.Inspector, queue string) uuid.UUID {
	t.Helper()
	letters, err := in.DeadLetters(context.Background(), queue, inspect.DeadLetterQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	return letters[0].DeadLetterID
}
