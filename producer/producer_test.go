package producer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

func setup(t *testing.T) (*gocql.Session, shardqtype.QueueConfig) {
	t.Helper()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(context.Background(), cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 4,
		BucketCount: 10, BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	return s, q
}

func TestScheduleTasksPlacesRows(t *testing.T) {
	t.Parallel()
	s, q := setup(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: testclock.New(now)})
	require.NoError(t, err)
	ctx := context.Background()

	tasks := make([]producer.Task, 1000)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: "q", Payload: []byte{byte(i)}, Priority: i % 10,
			DueAt: now.Add(time.Duration(i-500) * 10 * time.Millisecond)}
	}
	ids, err := p.ScheduleTasks(ctx, tasks)
	require.NoError(t, err)
	require.Len(t, ids, 1000)
	require.Equal(t, 1000, cassandratest.CountTaskRows(t, s, q.Layout()))

	l := q.Layout()
	for i, id := range ids[:50] {
		due := tasks[i].DueAt
		place := due
		if !place.After(now) {
			// Already due: placed by its rank among the call's past-due tasks, the last at now.
			place = shard.IDTime(id)
			require.False(t, place.After(now))
			require.True(t, place.After(now.Add(-time.Millisecond)))
		}
		var payload []byte
		var attempt, priority int
		var dueAt time.Time
		require.NoError(t, s.Query(`SELECT payload, attempt, priority, due_at FROM tasks
			WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`,
			l.Key(l.Bucket(place), l.ShardFor(id)), tasks[i].Priority, gocql.UUID(id)).Scan(&payload, &attempt, &priority, &dueAt))
		require.Equal(t, []byte{byte(i)}, payload)
		require.Zero(t, attempt)
		require.True(t, shard.IDTime(id).Equal(place), "the ID carries the due time, or about the time of scheduling when that is later")
		require.True(t, dueAt.Equal(due.Truncate(time.Millisecond)))
	}

	one, err := p.ScheduleTask(ctx, producer.Task{Queue: "q"})
	require.NoError(t, err)
	require.True(t, shard.IDTime(one).Equal(now), "zero DueAt means now")
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s, q := setup(t)
	ctx := context.Background()

	_, err := producer.New(nil, producer.Config{})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	for _, cfg := range []producer.Config{{MaxPayloadBytes: -1}, {MaxPayloadBytes: producer.MaxPayloadLimit + 1}, {WritesInFlight: -2}, {WriteAttempts: -1}, {ShardRate: -1}} {
		_, err := producer.New(cassandratest.Driver(s), cfg)
		require.ErrorIs(t, err, shardqtype.ErrInvalid, "%+v", cfg)
	}

	p, err := producer.New(cassandratest.Driver(s), producer.Config{MaxPayloadBytes: 10})
	require.NoError(t, err)
	good := producer.Task{Queue: "q"}
	cases := map[string]struct {
		task  producer.Task
		field string
		is    error
	}{
		"payload": {producer.Task{Queue: "q", Payload: make([]byte, 11)}, "tasks[1].Payload", producer.ErrPayloadTooLarge},
		"payload and headers": {producer.Task{Queue: "q", Payload: make([]byte, 6), Headers: map[string]string{"ab": "cde"}},
			"tasks[1].Payload", producer.ErrPayloadTooLarge},
		"headers large": {producer.Task{Queue: "q", Headers: map[string]string{"k": strings.Repeat("v", producer.MaxHeaderBytes)}},
			"tasks[1].Headers", producer.ErrHeadersTooLarge},
		"header key empty": {producer.Task{Queue: "q", Headers: map[string]string{"": "v"}}, "tasks[1].Headers", shardqtype.ErrInvalid},
		"header key utf8":  {producer.Task{Queue: "q", Headers: map[string]string{"\xff": "v"}}, "tasks[1].Headers", shardqtype.ErrInvalid},
		"header utf8":      {producer.Task{Queue: "q", Headers: map[string]string{"k": "\xc3"}}, "tasks[1].Headers", shardqtype.ErrInvalid},
		"priority high":    {producer.Task{Queue: "q", Priority: 10}, "tasks[1].Priority", shardqtype.ErrInvalid},
		"priority low":     {producer.Task{Queue: "q", Priority: -1}, "tasks[1].Priority", shardqtype.ErrInvalid},
		"before epoch":     {producer.Task{Queue: "q", DueAt: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}, "tasks[1].DueAt", shardqtype.ErrInvalid},
		"far too late":     {producer.Task{Queue: "q", DueAt: time.Date(6000, 1, 1, 0, 0, 0, 0, time.UTC)}, "tasks[1].DueAt", shardqtype.ErrInvalid},
		"too far ahead":    {producer.Task{Queue: "q", DueAt: time.Now().Add(producer.MaxDueAhead + time.Hour)}, "tasks[1].DueAt", shardqtype.ErrInvalid},
		"timeout long":     {producer.Task{Queue: "q", Timeout: time.Hour}, "tasks[1].Timeout", shardqtype.ErrInvalid},
		"timeout neg":      {producer.Task{Queue: "q", Timeout: -time.Second}, "tasks[1].Timeout", shardqtype.ErrInvalid},
		"timeout frac":     {producer.Task{Queue: "q", Timeout: 1500 * time.Microsecond}, "tasks[1].Timeout", shardqtype.ErrInvalid},
		"unknown queue":    {producer.Task{Queue: "nope"}, "", shardqtype.ErrQueueNotFound},
		"invalid queue":    {producer.Task{Queue: "No Such:Queue"}, "queue name", shardqtype.ErrInvalid},
		"empty queue":      {producer.Task{}, "queue name", shardqtype.ErrInvalid},
	}
	for name, c := range cases {
		_, err := p.ScheduleTasks(ctx, []producer.Task{good, c.task, good})
		require.ErrorIs(t, err, c.is, name)
		require.ErrorContains(t, err, c.field, name)
		_, err = p.ScheduleTask(ctx, c.task)
		require.ErrorIs(t, err, c.is, name)
	}
	require.Zero(t, cassandratest.CountTaskRows(t, s, q.Layout()), "a rejected call writes nothing, not even its good tasks")
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: "q", Payload: make([]byte, 6), Headers: map[string]string{"ab": "cd"}})
	require.NoError(t, err, "payload and headers fill the limit exactly")
	ids, err := p.ScheduleTasks(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, ids)
}
