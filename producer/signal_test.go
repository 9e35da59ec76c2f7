package producer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// A write that applied but was reported failed (a timeout after the replicas wrote it, or
// a merged batch sent under another caller's deadline) still touches its rows' cells: an idle
// consumer that holds floors for the partition takes the task within a sweep, rather than
// passing the partition as untouched and leaving the row for the next lap.
func TestFailedWriteStillSignals(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 1, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	clock := testclock.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	acquire := func() []*consumer.Task {
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		return got
	}
	// Idle polls up to 2.75 s: the last reads every partition (one full scan per half
	// LookAhead), so the consumer holds floors for bucket 2, which the task goes into.
	require.Empty(t, acquire())
	for range 11 {
		clock.Add(250 * time.Millisecond)
		require.Empty(t, acquire())
	}
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	timedOut := errors.New("write timed out after applying")
	producer.SetAfterWrite(p, func(err error) error { return errors.Join(err, timedOut) })
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("x")})
	require.ErrorIs(t, err, timedOut)

	bound := clock.Now().Add(time.Second + consumer.DefaultMaxClockSkew + consumer.SweepInterval)
	var got []*consumer.Task
	for len(got) == 0 && clock.Now().Before(bound) {
		clock.Add(250 * time.Millisecond)
		got = acquire()
	}
	require.Len(t, got, 1, "the applied row of a failed write was not delivered within a sweep")
	require.Equal(t, "x", string(got[0].Payload))
	require.NoError(t, c.AckTasks(ctx, got...))
}
