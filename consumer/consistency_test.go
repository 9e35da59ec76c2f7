package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
)

// recordingPolicy passes host selection on and records the consistency of every
// statement the driver executes.
type recordingPolicy struct {
	gocql.HostSelectionPolicy
	mu   sync.Mutex
	seen map[string]gocql.Consistency
}

func (p *recordingPolicy) Pick(q gocql.ExecutableQuery) gocql.NextHost {
	stmt := fmt.Sprintf("%T", q)
	switch q := q.(type) {
	case *gocql.Query:
		stmt = q.Statement()
	case *gocql.Batch:
		stmt = fmt.Sprintf("batch of %d, first: %s", q.Size(), q.Entries[0].Stmt)
	}
	p.mu.Lock()
	p.seen[stmt] = q.GetConsistency()
	p.mu.Unlock()
	return p.HostSelectionPolicy.Pick(q)
}

// Every statement the library sends is read or written at QUORUM (or SERIAL), whatever
// the session's default: a locked read at ONE on a cluster with RF > 1 could return rows
// the previous lock holder already swapped away, and deliver them a second time.
func TestConsistencyPinned(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	rec := &recordingPolicy{seen: map[string]gocql.Consistency{}}
	s := cassandratest.SessionFor(t, ks, func(c *gocql.ClusterConfig) {
		rec.HostSelectionPolicy = c.PoolConfig.HostSelectionPolicy
		c.PoolConfig.HostSelectionPolicy = rec
		c.Consistency = gocql.One
		c.SerialConsistency = gocql.LocalSerial
	})
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, s, shardq.QueueConfig{Name: "pinned", ShardCount: 2, BucketCount: 10,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	_, err = p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}, {Queue: q.Name}, {Queue: q.Name}})
	require.NoError(t, err)
	c, err := consumer.New(s, consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	var got []*consumer.Task
	require.Eventually(t, func() bool {
		more, err := c.AcquireTasks(ctx, 3)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) == 3
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, c.Retry(ctx, got[0], time.Second))
	require.NoError(t, c.DeadLetter(ctx, got[1], nil))
	require.NoError(t, c.AckTasks(ctx, got[2]))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.seen)
	for stmt, cons := range rec.seen {
		require.Contains(t, []gocql.Consistency{gocql.Quorum, gocql.Consistency(gocql.Serial)}, cons, "%s", stmt)
	}
}
