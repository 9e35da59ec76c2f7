package producer_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// With the default ShardRate, 100 tasks due a second sit in a queue's first shard; 2,000
// due at one instant fill the 8 shards with 20 each in turn, then spread over all of
// them from the 161st. Every task is found by its ID (a cancel) and delivered once due.
func TestLowRatesSitInTheFirstShards(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 8})
	require.NoError(t, err)
	now := time.Now().Truncate(time.Second)
	clock := testclock.New(now)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	l := q.Layout()
	rows := func(at time.Time) []int {
		counts := make([]int, l.ShardCount)
		for sh := range counts {
			require.NoError(t, s.Query(`SELECT count(*) FROM tasks WHERE shard_key = ? AND kind = 1`,
				l.Key(l.Bucket(at), sh)).Scan(&counts[sh]))
		}
		return counts
	}

	// 100 a second over 10 s, in one bucket.
	slow := make([]producer.Task, 1000)
	from := now.Add(l.BucketDuration).Truncate(l.BucketDuration)
	for i := range slow {
		slow[i] = producer.Task{Queue: "q", DueAt: from.Add(time.Duration(i) * 10 * time.Millisecond)}
	}
	slowIDs, err := p.ScheduleTasks(ctx, slow)
	require.NoError(t, err)
	require.Equal(t, []int{1000, 0, 0, 0, 0, 0, 0, 0}, rows(from))

	// 2,000 due at one instant, a bucket later.
	burstAt := from.Add(l.BucketDuration)
	burst := make([]producer.Task, 2000)
	for i := range burst {
		burst[i] = producer.Task{Queue: "q", DueAt: burstAt}
	}
	burstIDs, err := p.ScheduleTasks(ctx, burst)
	require.NoError(t, err)
	counts := rows(burstAt)
	total := 0
	for _, n := range counts {
		total += n
	}
	require.Equal(t, 2000, total)
	// The first 160 fill the eight shards with 20 each in turn; the other 1,840 spread
	// over all of them, 230 each give or take 14 (one standard deviation; the bound is
	// five).
	for sh := range 8 {
		for _, id := range burstIDs[sh*20 : (sh+1)*20] {
			require.Equal(t, sh, l.ShardFor(id))
		}
		require.InDelta(t, 250, counts[sh], 70, "shard %d", sh)
	}

	// Found by ID: cancel one of each.
	for _, id := range []uuid.UUID{slowIDs[500], burstIDs[1999]} {
		require.NoError(t, p.Cancel(ctx, id, producer.CancelOptions{}))
	}

	// Delivered: a consumer at the burst's time takes every task but the two cancelled.
	clock.Add(burstAt.Add(time.Second).Sub(now))
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: "q", Clock: clock})
	require.NoError(t, err)
	seen := map[uuid.UUID]int{}
	for empty := 0; empty < 3; {
		tasks, err := c.AcquireTasks(ctx, 500)
		require.NoError(t, err)
		if len(tasks) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, task := range tasks {
			seen[task.ID]++
		}
		require.NoError(t, c.AckTasks(ctx, tasks...))
	}
	require.Len(t, seen, 2998)
	for id, n := range seen {
		require.Equal(t, 1, n, "task %s", id)
	}
	require.NotContains(t, seen, slowIDs[500])
	require.NotContains(t, seen, burstIDs[1999])
	require.True(t, shard.IDTime(slowIDs[0]).Equal(from))
}
