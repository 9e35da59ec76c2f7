package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, time.Millisecond, percentile(sorted, 0))
	require.Equal(t, 50*time.Millisecond, percentile(sorted, 0.5))
	require.Equal(t, 99*time.Millisecond, percentile(sorted, 0.99))
	require.Equal(t, 100*time.Millisecond, percentile(sorted, 1))
	require.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 0.99))
	require.NotPanics(t, func() {
		require.Zero(t, percentile(nil, 1), "nothing delivered: no lateness")
	})
}

// TestTallyCompletesOnce: the demo stops its consumers when the last missing task
// arrives; a duplicate delivered after that must not signal completion again (closing
// the done channel twice panicked exactly when duplicates were to be reported).
func TestTallyCompletesOnce(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tl := newTally(3)
	require.False(t, tl.add(a, time.Millisecond))
	require.False(t, tl.add(a, time.Millisecond), "a duplicate completes nothing")
	require.False(t, tl.add(b, time.Millisecond))
	require.True(t, tl.add(c, time.Millisecond), "the last missing task completes the set")
	require.False(t, tl.add(c, time.Millisecond), "a duplicate after completion")
	require.False(t, tl.add(b, time.Millisecond), "another duplicate after completion")
	lost, dups := tl.outcome([]uuid.UUID{a, b, c}, nil)
	require.Zero(t, lost)
	require.Equal(t, 3, dups)
	require.Len(t, tl.lateness, 6, "every delivery's lateness counts")
}

func TestTallyCountsLost(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tl := newTally(3)
	require.False(t, tl.add(a, 0))
	require.False(t, tl.add(a, 0))
	lost, dups := tl.outcome([]uuid.UUID{a, b, c}, nil)
	require.Equal(t, 2, lost)
	require.Equal(t, 1, dups)
	lost, _ = tl.outcome([]uuid.UUID{a, b, c}, []uuid.UUID{a})
	require.Equal(t, 3, lost, "a delivered task still in the queue was never acked")
}

// TestDrainCountsRedelivery: a task whose lease ends unacked (as when an ack does not
// take) is delivered again; the drain goes on consuming until the queue is empty, so that
// delivery counts as a duplicate even though every task had already been seen once.
func TestDrainCountsRedelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "demo", BucketCount: 60,
		BucketDuration: time.Second, ShardCount: 2, DefaultTimeout: 30 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	// Taken first (highest priority) by a consumer that never acks it; its lease is short.
	unacked, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("x"), Priority: 9, Timeout: 2 * time.Second})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	taken, err := c.AcquireTasks(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, unacked, taken[0].ID)
	ids := []uuid.UUID{unacked}
	for range 5 {
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("x")})
		require.NoError(t, err)
		ids = append(ids, id)
	}

	cfg := config{tasks: len(ids), consumers: 2, batch: 10}
	d := startDrain(ctx, c, cfg)
	d.record(time.Now(), taken) // its first delivery, whose ack is lost
	require.NoError(t, d.wait(ctx, cassandratest.Driver(s), q, time.Minute))
	lost, dups := d.tally.outcome(ids, d.left)
	require.Zero(t, lost)
	require.Equal(t, 1, dups, "the unacked task came back once its lease ended")
	require.Empty(t, d.left)
}
