package taskid_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/shard"
)

// A task ID says its time and its queue's hint, and its concurrency shard still spreads
// evenly.
func TestTaskIDCarriesQueueHint(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	l := shard.Layout{Queue: "emails", BucketCount: 10, BucketDuration: time.Second, ShardCount: 8}
	counts := make([]int, l.ShardCount)
	for range 8000 {
		id := taskid.New(at, "emails")
		require.Equal(t, uuid.Version(1), id.Version())
		require.Equal(t, uuid.RFC4122, id.Variant())
		require.True(t, shard.IDTime(id).Equal(at))
		require.Equal(t, taskid.HintOf("emails"), taskid.Hint(id))
		counts[l.ShardFor(id)]++
	}
	for s, n := range counts {
		require.InDelta(t, 1000, n, 150, "shard %d", s)
	}
	require.NotEqual(t, taskid.HintOf("emails"), taskid.HintOf("reports"))
}

// NewIn keeps what New promises and places the ID in the first k shards, spread evenly
// over them.
func TestNewInPlacesInTheFirstShards(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ n, k int }{{8, 1}, {8, 3}, {8, 8}, {8, 20}, {1, 1}, {1024, 5}} {
		l := shard.Layout{Queue: "emails", BucketCount: 10, BucketDuration: time.Second, ShardCount: c.n}
		counts := map[int]int{}
		for range 6000 {
			id := taskid.NewIn(at, "emails", c.n, c.k)
			require.Equal(t, uuid.Version(1), id.Version())
			require.Equal(t, uuid.RFC4122, id.Variant())
			require.True(t, shard.IDTime(id).Equal(at))
			require.Equal(t, taskid.HintOf("emails"), taskid.Hint(id))
			counts[l.ShardFor(id)]++
		}
		used := min(c.k, c.n)
		require.Len(t, counts, used, "n %d k %d", c.n, c.k)
		for s, got := range counts {
			require.Less(t, s, used)
			require.InDelta(t, 6000/used, got, float64(6000/used)/4, "n %d k %d shard %d", c.n, c.k, s)
		}
	}
}
