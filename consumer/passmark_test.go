package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// taskReads counts the reads of the tasks table a session sends.
type taskReads struct{ n atomic.Int64 }

func (r *taskReads) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if strings.HasPrefix(q.Statement, "SELECT") && strings.Contains(q.Statement, "FROM tasks") {
		r.n.Add(1)
	}
}

// A consumer starting on a queue that another consumer has kept reads none of its
// partitions that nothing was written to: the other's pass mark, stored once its cursors
// passed a whole lap, and the signal cells show them empty. What is written after the
// mark is still delivered, due now or later.
func TestNewConsumerSkipsPartitionsAMarkShowsEmpty(t *testing.T) {
	t.Parallel()
	reads := &taskReads{}
	s := cassandratest.SessionFor(t, cassandratest.SchemaKeyspace(t), func(c *gocql.ClusterConfig) { c.QueryObserver = reads })
	ctx := context.Background()
	// A lap of 8 s, so the test clock passes one in a few steps; a clock days behind the
	// nodes', so the queue's creation tells the consumers nothing.
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 2, BucketCount: 8, BucketDuration: time.Second,
		DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	clock := testclock.New(base)
	newConsumer := func() *consumer.Consumer {
		c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
		require.NoError(t, err)
		return c
	}
	take := func(c *consumer.Consumer) []*consumer.Task {
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		return got
	}

	first := newConsumer()
	before := reads.n.Load()
	require.Empty(t, take(first))
	require.GreaterOrEqual(t, reads.n.Load()-before, int64(2*8), "without a mark, every partition of the lap is read")
	for range 10 { // past a whole lap, and the skew
		clock.Add(time.Second)
		require.Empty(t, take(first))
	}

	fresh := newConsumer()
	before = reads.n.Load()
	require.Empty(t, take(fresh))
	require.Zero(t, reads.n.Load()-before, "the mark and the cells show every partition empty")

	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	want, err := p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}, {Queue: q.Name, DueAt: clock.Now().Add(3 * time.Second)}})
	require.NoError(t, err)
	got := take(fresh)
	require.Equal(t, []uuid.UUID{want[0]}, ids(got), "due now")
	require.NoError(t, fresh.AckTasks(ctx, got...))
	clock.Add(3 * time.Second)
	later := newConsumer()
	got = take(later)
	require.Equal(t, []uuid.UUID{want[1]}, ids(got), "due later, by a consumer started since")
	require.NoError(t, later.AckTasks(ctx, got...))
}
