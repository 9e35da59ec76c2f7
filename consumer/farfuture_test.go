package consumer_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// TestDueAfter2262: time.UnixNano overflows after 2262-04-11, and
// task IDs and buckets were computed from it, so a task due later got the ID and bucket of
// a time 2^64 ns (about 584 years) earlier. One due exactly 2^64 ns from now was visible
// at once; the one due in 2300 landed in 1715. Each must come due at its own time.
func TestDueAfter2262(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 10, BucketDuration: time.Second})
	ctx := context.Background()
	in2300 := time.Date(2300, 6, 1, 0, 0, 0, 0, time.UTC)
	wrapsToNow := base.Add(math.MaxInt64).Add(math.MaxInt64).Add(2) // base + 2^64 ns, in 2611
	far := e.schedule(
		producer.Task{Payload: []byte("2300"), Priority: 9, DueAt: in2300},
		producer.Task{Payload: []byte("2611"), Priority: 9, DueAt: wrapsToNow},
	)
	now := e.schedule(producer.Task{Payload: []byte("now")})
	c := e.consumer()
	got := e.acquire(c, 10)
	var payloads []string
	for _, task := range got {
		payloads = append(payloads, string(task.Payload))
	}
	require.Equal(t, []string{"now"}, payloads, "the task due now is delivered, the far ones are not")
	require.Equal(t, []uuid.UUID{now[0]}, ids(got))
	require.NoError(t, c.AckTasks(ctx, got...))
	require.Empty(t, e.acquire(c, 10))

	// Nor are they lost: each comes due at its own time, not a millisecond before. Each
	// look is a new consumer's first: an idle consumer skips partitions whose signal cell
	// was not touched until its next full scan, and touching a cell decades ahead fails
	// (its TTL is out of range), which is not what this test is about.
	for i, due := range []time.Time{in2300, wrapsToNow} {
		for e.clock.Now().Before(due.Add(-time.Millisecond)) {
			e.clock.Add(min(due.Add(-time.Millisecond).Sub(e.clock.Now()), math.MaxInt64))
		}
		require.Empty(t, e.acquire(e.consumer(), 10), "a millisecond before %v", due)
		e.clock.Add(time.Millisecond)
		c := e.consumer()
		got := e.acquire(c, 10)
		require.Equal(t, []uuid.UUID{far[i]}, ids(got), "at %v", due)
		require.True(t, got[0].DueAt.Equal(due.Truncate(time.Millisecond)), "due_at is kept to the millisecond")
		require.NoError(t, c.AckTasks(ctx, got...))
	}
}
