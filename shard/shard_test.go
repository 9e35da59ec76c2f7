package shard_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/shard"
)

func layout() shard.Layout {
	return shard.Layout{Queue: "q", BucketCount: 7, BucketDuration: 3 * time.Second, ShardCount: 16}
}

func TestTimeShardRollsAndIsNeverNegative(t *testing.T) {
	t.Parallel()
	l := layout()
	for b := int64(-50); b < 50; b++ {
		ts := l.TimeShard(b)
		require.GreaterOrEqual(t, ts, 0)
		require.Less(t, ts, l.BucketCount)
		require.Equal(t, ts, l.TimeShard(b+int64(l.BucketCount)), "a lap later lands in the same time shard")
	}
	before := time.Unix(-1, 0)
	require.Equal(t, int64(-1), l.Bucket(before), "floor division before the epoch")
	require.Equal(t, int64(0), l.Bucket(time.Unix(2, 999_999_999)))
	require.Equal(t, int64(1), l.Bucket(time.Unix(3, 0)))
	require.Equal(t, time.Unix(3, 0), l.BucketStart(1))
	require.Equal(t, 21*time.Second, l.Lap())
}

// TestShardForSpreadsEvenly shows concurrency shards are never negative and spread evenly:
// 160,000 IDs over 16 shards stay within 3% of the mean and pass a chi-square test.
func TestShardForSpreadsEvenly(t *testing.T) {
	t.Parallel()
	l := layout()
	const n = 160_000
	counts := make([]int, l.ShardCount)
	now := time.Now()
	for i := 0; i < n; i++ {
		s := l.ShardFor(shard.NewID(now))
		require.GreaterOrEqual(t, s, 0)
		counts[s]++
	}
	mean := float64(n) / float64(l.ShardCount)
	chi2 := 0.0
	for s, c := range counts {
		// Five standard deviations: a 3% bound (3.1 of them) failed about one run in 30.
		require.InDelta(t, mean, float64(c), 5*math.Sqrt(mean), "shard %d", s)
		chi2 += math.Pow(float64(c)-mean, 2) / mean
	}
	// 15 degrees of freedom: p = 0.001 at 37.7.
	require.Less(t, chi2, 37.7, "counts %v", counts)
}

func TestIDsCarryTimeAndOrder(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456700, time.UTC)
	id := shard.NewID(at)
	require.Equal(t, uuid.Version(1), id.Version())
	require.Equal(t, uuid.RFC4122, id.Variant())
	require.True(t, at.Equal(shard.IDTime(id)))
	require.NotEqual(t, id, shard.NewID(at), "same time, different IDs")
	require.True(t, shard.IDTime(shard.MinID(at)).Equal(at))
	require.True(t, shard.IDTime(shard.MaxID(at)).Equal(at))
}

func TestKeys(t *testing.T) {
	t.Parallel()
	l := layout()
	require.Equal(t, "q:3:5", l.Key(10, 5))
	q, ts, cs, err := shard.ParseKey("emails.v2:12:0")
	require.NoError(t, err)
	require.Equal(t, "emails.v2", q)
	require.Equal(t, 12, ts)
	require.Equal(t, 0, cs)
	l.Generation = 2
	require.Equal(t, "q~2:3:5", l.Key(10, 5), "a later generation's ring is apart from the first's")
	q, ts, cs, err = shard.ParseKey("emails.v2~12:12:0")
	require.NoError(t, err)
	require.Equal(t, "emails.v2", q, "the queue, without the generation")
	require.Equal(t, 12, ts)
	require.Equal(t, 0, cs)
	for _, bad := range []string{"", "q", "q:1", "q:1:2:3", "Q:1:2", "q:-1:2", "q:1:+2", "q:01:2", ":1:2", "q:1:x",
		"q~0:1:2", "q~:1:2", "q~01:1:2", "q~-1:1:2", "~1:1:2", "q~1~2:1:2"} {
		_, _, _, err := shard.ParseKey(bad)
		require.ErrorIs(t, err, shard.ErrBadKey, bad)
	}
	require.True(t, shard.ValidQueueName("a"))
	require.False(t, shard.ValidQueueName("a:b"))
	require.False(t, shard.ValidQueueName("-a"))
	require.False(t, shard.ValidQueueName(string(make([]byte, 64))))
}

// TestAfter2262: t.UnixNano overflows after 2262-04-11, and IDs and buckets
// must not, up to MaxIDTime.
func TestAfter2262(t *testing.T) {
	t.Parallel()
	l := layout()
	for _, at := range []time.Time{
		time.Date(2262, 4, 11, 23, 47, 16, 854775800, time.UTC), // the last UnixNano, to 100 ns
		time.Date(2262, 4, 11, 23, 47, 16, 854775900, time.UTC),
		time.Date(2300, 6, 1, 0, 0, 0, 0, time.UTC),
		shard.MaxIDTime,
	} {
		require.True(t, shard.IDTime(shard.NewID(at)).Equal(at), "%v", at)
		require.Equal(t, at.Unix()/3, l.Bucket(at), "%v", at)
		require.True(t, l.BucketStart(l.Bucket(at)).Equal(time.Unix(at.Unix()/3*3, 0)), "%v", at)
		require.Equal(t, -1, shard.CompareIDs(shard.NewID(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), shard.NewID(at)))
	}
}
