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

// NewIn keeps what New promises and places the ID in the shard asked for, or evenly in
// any when asked for none; IDs stay distinct.
func TestNewInPlacesInItsShard(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct{ n, s int }{{8, 0}, {8, 3}, {8, 7}, {8, -1}, {1, 0}, {1024, 1000}, {3, -1}} {
		l := shard.Layout{Queue: "emails", BucketCount: 10, BucketDuration: time.Second, ShardCount: c.n}
		counts := map[int]int{}
		ids := map[uuid.UUID]bool{}
		for range 6000 {
			id := taskid.NewIn(at, "emails", c.n, c.s)
			require.Equal(t, uuid.Version(1), id.Version())
			require.Equal(t, uuid.RFC4122, id.Variant())
			require.True(t, shard.IDTime(id).Equal(at))
			require.Equal(t, taskid.HintOf("emails"), taskid.Hint(id))
			counts[l.ShardFor(id)]++
			ids[id] = true
		}
		require.Len(t, ids, 6000)
		if c.s >= 0 {
			require.Equal(t, map[int]int{c.s: 6000}, counts, "n %d s %d", c.n, c.s)
			continue
		}
		require.Len(t, counts, c.n)
		for sh, got := range counts {
			require.InDelta(t, 6000/c.n, got, float64(6000/c.n)/4, "n %d shard %d", c.n, sh)
		}
	}
}
