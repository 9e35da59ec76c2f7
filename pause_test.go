package shardq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
)

// A paused queue's consumers take nothing and say why, producers keep scheduling, and
// once it is resumed its tasks are taken again within SettingsRefresh.
func TestPauseQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	require.ErrorIs(t, shardq.PauseQueue(ctx, cassandratest.Driver(s), "nosuch"), shardq.ErrQueueNotFound)
	require.ErrorIs(t, shardq.ResumeQueue(ctx, cassandratest.Driver(s), "nosuch"), shardq.ErrQueueNotFound)
	require.ErrorIs(t, shardq.PauseQueue(ctx, cassandratest.Driver(s), "Bad Name"), shardq.ErrInvalid)

	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "emails", BucketCount: 60, BucketDuration: time.Second, ShardCount: 2})
	require.NoError(t, err)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	require.NoError(t, shardq.PauseQueue(ctx, cassandratest.Driver(s), q.Name))
	require.NoError(t, shardq.PauseQueue(ctx, cassandratest.Driver(s), q.Name), "pausing a paused queue does nothing")
	info, err := in.Queue(ctx, q.Name)
	require.NoError(t, err)
	require.True(t, info.Paused)

	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("x")})
	require.NoError(t, err, "producers schedule into a paused queue")
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 10)
	require.ErrorIs(t, err, shardq.ErrQueuePaused)
	require.Empty(t, got)

	require.NoError(t, shardq.ResumeQueue(ctx, cassandratest.Driver(s), q.Name))
	info, err = in.Queue(ctx, q.Name)
	require.NoError(t, err)
	require.False(t, info.Paused)
	deadline := time.Now().Add(shardq.SettingsRefresh + 5*time.Second)
	for {
		got, err = c.AcquireTasks(ctx, 10)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, shardq.ErrQueuePaused)
		require.True(t, time.Now().Before(deadline), "still paused %v after the resume", shardq.SettingsRefresh+5*time.Second)
		time.Sleep(100 * time.Millisecond)
	}
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
	require.NoError(t, c.AckTasks(ctx, got...))
}
