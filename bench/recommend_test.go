package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRecommend(t *testing.T) {
	pt := func(shards int, bucket time.Duration, consumers, batch int, drain, p99 float64) point {
		return point{shards: shards, bucket: bucket, consumers: consumers, batch: batch, drain: drain, p99: p99}
	}
	grid := []point{
		pt(16, time.Second, 8, 200, 9000, 300),
		pt(4, 10*time.Second, 8, 200, 7000, 450),
		pt(4, time.Second, 4, 50, 6000, 400),
		pt(4, time.Second, 4, 200, 6500, 350),
		pt(8, time.Second, 2, 200, 8000, 900),
	}
	for _, tc := range []struct {
		name    string
		target  target
		want    point
		met     bool
		buckets int
		reason  string
	}{
		{name: "no rate: the fastest on time", target: target{p99: 500 * time.Millisecond},
			want: grid[0], met: true, buckets: 601},
		{name: "no bound at all: the fastest", target: target{},
			want: grid[0], met: true, buckets: 601},
		{name: "fewest shards, then consumers, then fastest", target: target{rate: 3000, p99: 500 * time.Millisecond},
			want: grid[3], met: true, buckets: 601},
		{name: "headroom rules out a point that drains the rate itself", target: target{rate: 4500, p99: 500 * time.Millisecond},
			want: grid[1], met: true, buckets: 61},
		{name: "fewer shards beat fewer consumers", target: target{rate: 4500, p99: time.Second},
			want: grid[1], met: true, buckets: 61},
		{name: "the p99 bound rules out the cheaper point", target: target{rate: 5000, p99: 500 * time.Millisecond},
			want: grid[0], met: true, buckets: 601},
		{name: "too fast a rate: the fastest, not met", target: target{rate: 7000, p99: 500 * time.Millisecond},
			want: grid[0], buckets: 601, reason: "no point drained 10500 tasks/s"},
		{name: "fast enough but late: the fastest, not met", target: target{rate: 5000, p99: 100 * time.Millisecond},
			want: grid[0], buckets: 601, reason: "had a lateness p99 within 100ms"},
		{name: "no rate, all late", target: target{p99: 100 * time.Millisecond},
			want: grid[0], buckets: 601, reason: "no point had a lateness p99 within 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := recommend(grid, tc.target)
			require.NoError(t, err)
			require.Equal(t, tc.want, r.point)
			require.Equal(t, tc.met, r.met)
			require.Equal(t, tc.buckets, r.bucketCount)
			require.Greater(t, r.lap(), gcGrace, "the lap exceeds gc_grace_seconds")
			require.Contains(t, r.reason, tc.reason)
			require.Equal(t, tc.met, r.reason == "")
		})
	}
}

func TestRecommendTiesAndBuckets(t *testing.T) {
	// Equal drains: the lower p99 wins, whatever the grid's order.
	a := point{shards: 4, bucket: 7 * time.Second, consumers: 4, batch: 50, drain: 5000, p99: 300}
	b := a
	b.batch, b.p99 = 200, 200
	for _, grid := range [][]point{{a, b}, {b, a}} {
		r, err := recommend(grid, target{rate: 1000})
		require.NoError(t, err)
		require.Equal(t, b, r.point)
		// 86 x 7 s = 602 s, the least lap over 600 s.
		require.Equal(t, 86, r.bucketCount)
		require.Equal(t, "shardq queue resize NAME --shards 4 --bucket 7s --buckets 86", r.command())
		res := r.result()
		require.Equal(t, "sweep-recommendation", res["workload"])
		require.Equal(t, true, res["met"])
		require.NotContains(t, res, "reason")
	}
	_, err := recommend(nil, target{})
	require.ErrorIs(t, err, errNoPoints)
}

func TestRecommendationPrint(t *testing.T) {
	r, err := recommend([]point{{shards: 2, bucket: time.Second, consumers: 2, batch: 100, drain: 4000, p99: 800}},
		target{rate: 3000, p99: 500 * time.Millisecond})
	require.NoError(t, err)
	var out strings.Builder
	r.print(&out)
	for _, want := range []string{">= 3000 tasks/s (4500 with 1.5x headroom), lateness p99 <= 500ms",
		"NOT MET: no point drained 4500 tasks/s", "2 shards, 601 x 1s buckets (lap 10m1s > gc_grace_seconds 10m0s)",
		"shardq queue resize NAME --shards 2 --bucket 1s --buckets 601",
		"shardqtype.LayoutConfig{ShardCount: 2, BucketDuration: 1000 * time.Millisecond, BucketCount: 601}"} {
		require.Contains(t, out.String(), want)
	}
}
