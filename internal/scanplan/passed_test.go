package scanplan

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/shard"
)

// A plan starting with a fresh stored mark reads none of its quiet partitions; with none,
// a stale one, or one that does not reach two laps back, it reads every current one.
func TestPassMarkSkipsQuietPartitions(t *testing.T) {
	t.Parallel()
	n := int64(testLayout.BucketCount)
	lapStart := b0 - n + 1
	for _, tc := range []struct {
		name    string
		mark    map[int]int64
		madeAt  time.Time
		created int64
		skipped []int // the shards whose quiet partitions are not read
	}{
		{"no mark", nil, time.Time{}, math.MinInt64, nil},
		{"a fresh mark", map[int]int64{0: b0 - 1, 1: b0 - 2}, at(-20), math.MinInt64, []int{0, 1}},
		{"a mark older than MarkLife", map[int]int64{0: b0 - 1, 1: b0 - 2}, at(-31), math.MinInt64, nil},
		{"a mark from a clock ahead", map[int]int64{0: b0 - 1, 1: b0 - 2}, at(3), math.MinInt64, nil},
		{"a mark not two laps past the lap start", map[int]int64{0: lapStart - 2*n, 1: lapStart - 2*n}, at(-1), math.MinInt64, nil},
		{"the queue's creation", nil, time.Time{}, lapStart - n, []int{0, 1}},
		{"a mark of one shard", map[int]int64{1: b0}, at(-1), math.MinInt64, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// reads returns the (bucket, shard) of what a new plan's first idle scan reads.
			reads := func(cells Cells) []Cell {
				p := newTestPlan(t0, 0)
				p.StartPassed(tc.mark, tc.madeAt, tc.created, t0)
				parts := p.Candidates(t0)
				from, to, ok := p.Lookback(parts, t0)
				if ok {
					require.Equal(t, []int64{lapStart - n, b0 - n}, []int64{from, to}, "a lap before the current buckets")
				}
				read, _ := p.IdleReads(parts, t0, cells, ok, t0)
				var out []Cell
				for _, i := range read {
					out = append(out, parts[i].cell())
				}
				return out
			}
			var want []Cell
			for s := range testLayout.ShardCount {
				if !slices.Contains(tc.skipped, s) {
					for b := lapStart; b <= b0; b++ {
						want = append(want, Cell{b, s})
					}
				}
			}
			require.ElementsMatch(t, want, reads(Cells{}))

			// A touch in this lap or the one before has its partition read.
			cells := Cells{Cell{b0 - 1 - n, 1}: shard.NewID(at(-45)), Cell{b0, 0}: shard.NewID(at(-1))}
			for _, c := range []Cell{{b0 - 1, 1}, {b0, 0}} {
				if !slices.Contains(want, c) {
					want = append(want, c)
				}
			}
			require.ElementsMatch(t, want, reads(cells))
		})
	}
}

// A plan's mark joins its cursors once it reaches where the plan began, or the cursors
// passed a whole lap; a late write or a visible row holds it back, and so does a cursor
// that lagged a lap; it is stored every half lap, when it moved.
func TestPassMarkFollowsCursors(t *testing.T) {
	t.Parallel()
	n := int64(testLayout.BucketCount)
	d := testLayout.BucketDuration
	lapStart := b0 - n + 1
	// call is a call at now that finds every ended partition empty but those of hold,
	// where a row of bucket hold[pt] is visible.
	call := func(p *Plan, now time.Time, hold map[Cell]int64) {
		parts := p.Candidates(now)
		for i := range parts {
			pt := &parts[i]
			if b, ok := hold[pt.cell()]; ok {
				pt.See(shard.MinID(testLayout.BucketStart(b)), now)
				continue
			}
			pt.Finished = p.Ended(pt, now)
		}
		p.Advance(parts, now)
	}

	p := newTestPlan(t0, 0)
	p.StartPassed(nil, time.Time{}, math.MinInt64, t0)
	call(p, t0, nil)
	_, ok := p.MarkDue(t0)
	require.False(t, ok, "cursors that have not passed a lap prove nothing below where they began")
	now := t0
	for range n + 1 {
		now = now.Add(d)
		call(p, now, nil)
	}
	mark, ok := p.MarkDue(now)
	require.True(t, ok)
	bNow := testLayout.Bucket(now)
	require.Equal(t, map[int]int64{0: bNow, 1: bNow}, mark, "every ended bucket")
	p.Marked(mark, now)
	_, ok = p.MarkDue(now.Add(testLayout.Lap() / 4))
	require.False(t, ok, "not before half a lap")

	p.Late(map[Cell]time.Time{{bNow - 2, 1}: now.Add(-15 * time.Second)})
	now = now.Add(testLayout.Lap() / 2)
	mark, ok = p.MarkDue(now)
	require.True(t, ok)
	require.Equal(t, map[int]int64{0: bNow, 1: bNow - 2}, mark, "a late row's bucket is no longer passed")

	// A visible row holds the mark at its bucket, until its partition is found empty.
	q := newTestPlan(t0, 0)
	q.StartPassed(map[int]int64{0: b0 - 1, 1: b0 - 1}, at(-1), math.MinInt64, t0)
	call(q, t0, map[Cell]int64{{b0 - 2, 0}: b0 - 2})
	mark, ok = q.MarkDue(t0)
	require.True(t, ok)
	require.Equal(t, map[int]int64{0: b0 - 2, 1: b0}, mark)
	call(q, t0.Add(d), nil)
	mark, _ = q.MarkDue(t0.Add(testLayout.Lap()))
	require.Equal(t, map[int]int64{0: b0 + 1, 1: b0 + 1}, mark)

	// A row of a lap before the plan began holds it until the cursor passes a whole lap
	// from where the plan began.
	q = newTestPlan(t0, 0)
	q.StartPassed(map[int]int64{0: b0 - 1, 1: b0 - 1}, at(-1), math.MinInt64, t0)
	call(q, t0, map[Cell]int64{{b0 - 1, 1}: b0 - 1 - n})
	mark, _ = q.MarkDue(t0)
	require.Equal(t, map[int]int64{0: b0, 1: b0 - 1 - n}, mark)
	call(q, t0.Add(d), nil)
	mark, _ = q.MarkDue(t0.Add(testLayout.Lap()))
	require.Equal(t, map[int]int64{0: b0 + 1, 1: b0 + 1}, mark, "lapStart..b0 passed")

	// A cursor a lap behind its candidates jumps buckets it has not drained: the mark
	// stays at it.
	r := newTestPlan(t0, 0)
	r.StartPassed(map[int]int64{0: lapStart, 1: lapStart}, at(-1), math.MinInt64, t0)
	call(r, t0, map[Cell]int64{{lapStart, 0}: lapStart})
	later := t0.Add(testLayout.Lap())
	call(r, later, nil)
	mark, _ = r.MarkDue(later)
	require.Equal(t, lapStart, mark[0], "shard 0 lapped at %d", lapStart)
}

// A plan running for laps that finds a row below its cursor (a late row no sweep saw)
// holds its mark at the row's bucket until the cursor passes the row's partition.
func TestPassMarkHeldBelowTheCursor(t *testing.T) {
	t.Parallel()
	n := int64(testLayout.BucketCount)
	p := newTestPlan(t0, 0)
	p.StartPassed(nil, time.Time{}, math.MinInt64, t0)
	now := t0
	for range 3 * n {
		now = now.Add(testLayout.BucketDuration)
		parts := p.Candidates(now)
		for i := range parts {
			parts[i].Finished = p.Ended(&parts[i], now)
		}
		p.Advance(parts, now)
	}
	bNow := testLayout.Bucket(now)
	parts := p.Candidates(now)
	for i := range parts {
		pt := &parts[i]
		if pt.Shard == 0 && pt.Bucket == bNow {
			pt.See(shard.MinID(testLayout.BucketStart(bNow-n)), now) // a row of the lap before
			continue
		}
		pt.Finished = p.Ended(pt, now)
	}
	p.Advance(parts, now)
	mark, _ := p.MarkDue(now)
	require.Equal(t, bNow-n, mark[0])
	require.Equal(t, bNow, mark[1])
}

// A call whose parts do not follow on from a cursor moved back since its Candidates (a
// sweep's Late beside it) does not move that shard's cursor, nor its mark.
func TestAdvanceAfterACursorMovedBack(t *testing.T) {
	t.Parallel()
	d := testLayout.BucketDuration
	p := newTestPlan(t0, 0)
	p.StartPassed(nil, time.Time{}, b0-int64(testLayout.BucketCount)+1, t0)
	call := func(now time.Time, between func()) {
		parts := p.Candidates(now)
		between()
		for i := range parts {
			parts[i].Finished = p.Ended(&parts[i], now)
		}
		p.Advance(parts, now)
	}
	call(t0, func() {})
	require.Equal(t, []int64{b0, b0}, p.Cursors())
	call(t0.Add(d), func() { p.Late(map[Cell]time.Time{{b0 - 1, 0}: at(-10)}) })
	require.Equal(t, []int64{b0 - 1, b0 + 1}, p.Cursors())
	mark, _ := p.MarkDue(t0.Add(d))
	require.Equal(t, map[int]int64{0: b0 - 1, 1: b0 + 1}, mark)
}
