package layouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/shard"
)

// A history survives its encoding, and places rows by the generation in force at their
// time, or at the writer's now for rows already visible.
func TestHistory(t *testing.T) {
	t.Parallel()
	first := shard.Layout{Queue: "q", BucketCount: 60, BucketDuration: 10 * time.Second, ShardCount: 8}
	h, err := layouts.Decode(first, "")
	require.NoError(t, err)
	require.Equal(t, "", h.Encode(), "a queue that never changed stores nothing")
	e1, e2 := time.UnixMilli(1_000_000), time.UnixMilli(2_000_000)
	second := shard.Layout{Queue: "q", Generation: 1, BucketCount: 60, BucketDuration: time.Second, ShardCount: 16}
	third := shard.Layout{Queue: "q", Generation: 2, BucketCount: 30, BucketDuration: time.Second, ShardCount: 2}
	h.Gens = append(h.Gens, layouts.Gen{Layout: second, From: e1}, layouts.Gen{Layout: third, From: e2})
	h.Drained, h.Version = 1, 7
	back, err := layouts.Decode(first, h.Encode())
	require.NoError(t, err)
	require.Equal(t, h.Encode(), back.Encode())
	require.Equal(t, h.Gens[1].Layout, back.Gens[1].Layout)
	require.True(t, back.Gens[2].From.Equal(e2))
	require.Equal(t, int64(7), back.Version)

	require.Equal(t, first, h.At(e1.Add(-time.Millisecond)))
	require.Equal(t, second, h.At(e1))
	require.Equal(t, third, h.At(e2.Add(time.Hour)))
	require.Equal(t, second, h.Place(e1.Add(-time.Hour), e1), "a row already visible goes by the writer's now")
	require.Equal(t, third, h.Place(e2, e1), "a row due later goes by its time")
	require.Equal(t, []shard.Layout{second, third}, h.Live())
	require.Equal(t, time.Minute, h.LongestLap(), "of the live generations only")
	sealed, ok := h.Sealed(1, 5*time.Second)
	require.True(t, ok)
	require.True(t, sealed.Equal(e2.Add(5*time.Second)))
	_, ok = h.Sealed(2, time.Second)
	require.False(t, ok, "the newest generation is never sealed")

	for _, bad := range []string{"{", `{"gens":[],"drained":1}`} {
		_, err = layouts.Decode(first, bad)
		require.Error(t, err, bad)
	}
}
