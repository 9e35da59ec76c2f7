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
// a time 2^64 ns (about 584 years) earlier. One due exactly 2^64 ns from base was visible
// at once; the one due in 2300 landed in 1715. Each must come due at its own time. (A task
// may be due at most producer.MaxDueAhead after it is scheduled, so each is scheduled a
// year before it is due, by a clock moved that far.)
func TestDueAfter2262(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 10, BucketDuration: time.Second})
	ctx := context.Background()
	in2300 := time.Date(2300, 6, 1, 0, 0, 0, 0, time.UTC)
	wrapsToNow := base.Add(math.MaxInt64).Add(math.MaxInt64).Add(2) // base + 2^64 ns, in 2611
	moveTo := func(at time.Time) {
		for e.clock.Now().Before(at) {
			e.clock.Add(min(at.Sub(e.clock.Now()), math.MaxInt64))
		}
	}
	for _, due := range []time.Time{in2300, wrapsToNow} {
		moveTo(due.AddDate(-1, 0, 0))
		far := e.schedule(producer.Task{Payload: []byte("far"), Priority: 9, DueAt: due})
		now := e.schedule(producer.Task{Payload: []byte("now")})
		c := e.consumer()
		got := e.acquire(c, 10)
		require.Equal(t, []uuid.UUID{now[0]}, ids(got), "the task due now is delivered, the far one is not")
		require.NoError(t, c.AckTasks(ctx, got...))
		require.Empty(t, e.acquire(c, 10))

		// Nor is it lost: it comes due at its own time, not a millisecond before. Each look
		// is a new consumer's first, whose stored pass mark is a year old: it reads every
		// partition of its lap.
		moveTo(due.Add(-time.Millisecond))
		require.Empty(t, e.acquire(e.consumer(), 10), "a millisecond before %v", due)
		e.clock.Add(time.Millisecond)
		c = e.consumer()
		got = e.acquire(c, 10)
		require.Equal(t, []uuid.UUID{far[0]}, ids(got), "at %v", due)
		require.True(t, got[0].DueAt.Equal(due.Truncate(time.Millisecond)), "due_at is kept to the millisecond")
		require.NoError(t, c.AckTasks(ctx, got...))
	}
}
