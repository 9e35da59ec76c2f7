package scanplan

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/shard"
)

// The layout of the tests: four buckets of 10 s per lap, two concurrency shards.
var testLayout = shard.Layout{Queue: "q", BucketCount: 4, BucketDuration: 10 * time.Second, ShardCount: 2}

const testSkew = 2 * time.Second

// t0 is 5 s into bucket b0.
var (
	t0 = time.Unix(1_800_000_005, 0)
	b0 = testLayout.Bucket(t0)
)

func newTestPlan(now time.Time, first int) *Plan {
	return New(Config{Layout: testLayout, Skew: testSkew, LookAhead: 5 * time.Second, MaxTakeBytes: 4 << 20,
		MaxPageRows: 1000, SlotStart: func(b int64, slot int) time.Time { return signal.SlotStart(testLayout, b, slot) },
	}, now, first)
}

// part returns the candidate of bucket b and shard s as Candidates lists it at t0.
func part(b int64, s int) Part {
	return Part{Key: testLayout.Key(b, s), Shard: s, Bucket: b, Ahead: b > b0}
}

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// floorTimes returns the times of pt's floors, per priority; nil without floors.
func floorTimes(p *Plan, pt *Part) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.floors[pt.pkey()]
	if !ok {
		return nil
	}
	var ts []time.Time
	for _, id := range f {
		ts = append(ts, shard.IDTime(id))
	}
	return ts
}

// storedAt returns floors stored at t for every priority.
func storedAt(t time.Time) map[int8]uuid.UUID {
	m := map[int8]uuid.UUID{}
	for prio := range NPriorities {
		m[int8(prio)] = shard.MinID(t)
	}
	return m
}

var errSome = errors.New("some failure")

func same(t time.Time) []time.Time {
	ts := make([]time.Time, NPriorities)
	for i := range ts {
		ts[i] = t
	}
	return ts
}

// A new plan looks back one whole lap and up to LookAhead ahead, shard by shard from a
// rotating start, oldest bucket first; a hot partition is assumed to hold PeekLimit rows,
// unless it lies ahead.
func TestCandidates(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 1)
	var want []Part
	for _, s := range []int{1, 0} {
		for b := b0 - 3; b <= b0+1; b++ {
			want = append(want, part(b, s))
		}
	}
	require.Equal(t, want, p.Candidates(t0))

	hot := part(b0, 0)
	p.Taken(&hot, true)
	got := p.Candidates(t0) // starts at shard 0 this time
	require.Equal(t, 0, got[0].Shard)
	for _, pt := range got {
		wantAvail := 0
		if pt.Key == hot.Key && pt.Bucket == b0 {
			wantAvail = PeekLimit
		}
		require.Equal(t, wantAvail, pt.Avail, "bucket %d shard %d", pt.Bucket, pt.Shard)
	}

	p.Taken(&hot, false) // a take that came up short: no longer hot
	for _, pt := range p.Candidates(t0) {
		require.Zero(t, pt.Avail)
	}

	// A partition ahead is read only for NextDue, hot or not. (Its key is that of the
	// lap's first bucket, which the cursor passes first.)
	parts := p.Candidates(t0)
	for i := range parts {
		parts[i].Finished = parts[i].Bucket == b0-3
	}
	p.Advance(parts, t0)
	ahead := part(b0+1, 0)
	p.Taken(&ahead, true)
	parts = p.Candidates(t0)
	require.Equal(t, ahead, parts[len(parts)-1])
	for _, pt := range parts {
		require.Zero(t, pt.Avail)
	}
}

// Each shard's cursor moves past its leading run of finished buckets, and no further.
func TestAdvanceMovesCursorsPastFinishedRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		finished map[int][]int64 // per shard, the buckets found finished
		want     []int64
	}{
		{"nothing finished", nil, []int64{b0 - 3, b0 - 3}},
		{"a leading run", map[int][]int64{0: {b0 - 3, b0 - 2}, 1: {b0 - 3}}, []int64{b0 - 1, b0 - 2}},
		{"a gap stops the cursor", map[int][]int64{0: {b0 - 3, b0 - 1}}, []int64{b0 - 2, b0 - 3}},
		{"the first bucket busy", map[int][]int64{1: {b0 - 2, b0 - 1}}, []int64{b0 - 3, b0 - 3}},
		{"the whole lap", map[int][]int64{0: {b0 - 3, b0 - 2, b0 - 1}}, []int64{b0, b0 - 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newTestPlan(t0, 0)
			parts := p.Candidates(t0)
			for i := range parts {
				for _, b := range tc.finished[parts[i].Shard] {
					parts[i].Finished = parts[i].Finished || parts[i].Bucket == b
				}
			}
			p.Advance(parts, t0)
			require.Equal(t, tc.want, p.Cursors())
		})
	}
}

// Across laps: a cursor left behind by a lap that passed comes up to the oldest bucket of
// the current lap, and a partition's floors forgotten behind the cursor are kept, to start
// the same partition's floors in its next lap.
func TestCursorsAndFloorsAcrossLaps(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	old := part(b0-3, 0)
	p.StartFloors(&old, nil)
	s := NewSpan(at(-30))
	s.Cover(Group{Prios: AllPriorities}, false)
	p.Read(&old, s)
	require.Equal(t, same(at(-32)), floorTimes(p, &old))

	later := t0.Add(2 * testLayout.Lap()) // two laps on, no call in between
	parts := p.Candidates(later)
	require.Equal(t, b0+8-3, parts[0].Bucket, "the cursor comes up to the current lap")
	p.Advance(parts, later)
	require.Nil(t, floorTimes(p, &old), "floors behind the lap are forgotten")

	// The same partition two laps on starts from the floors kept, not from the start.
	next := Part{Key: old.Key, Shard: 0, Bucket: old.Bucket + 8}
	require.Equal(t, old.Key, testLayout.Key(next.Bucket, 0))
	p.StartFloors(&next, nil)
	require.Equal(t, same(at(-32)), floorTimes(p, &next))
}

// Floors start at the highest of those stored by the last swap and those kept from an
// earlier lap; with neither, at the beginning of time. Floors already set are kept.
func TestStartFloors(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	pt := part(b0, 1)
	p.StartFloors(&pt, map[int8]uuid.UUID{0: shard.MinID(at(-1)), 9: shard.MinID(at(-3))})
	want := same(shard.MinIDTime)
	want[0], want[9] = at(-1), at(-3)
	require.Equal(t, want, floorTimes(p, &pt))
	p.StartFloors(&pt, nil)
	require.Equal(t, want, floorTimes(p, &pt), "floors set are not started again")
}

// raise: each way a read moves a priority's floor.
func TestFloorsRaise(t *testing.T) {
	t.Parallel()
	readAt := at(0)
	settled := at(-2) // readAt less the skew
	row := func(sec float64) uuid.UUID { return shard.NewID(at(sec)) }
	for _, tc := range []struct {
		name  string
		start time.Time // every priority's floor before the read
		read  func(s *Span)
		want  map[int]time.Time // priorities whose floor moved, and where to
	}{
		{"an empty priority read in full rests at readAt less the skew", at(-10),
			func(s *Span) { s.Cover(Group{Prios: []int8{9, 8}}, false) },
			map[int]time.Time{9: settled, 8: settled}},
		{"a priority read in full rests below its first row left", at(-10),
			func(s *Span) { s.Note(9, row(-5)); s.Cover(Group{Prios: []int8{9}}, false) },
			map[int]time.Time{9: at(-5).Add(-100 * time.Nanosecond)}},
		{"never above readAt less the skew, whatever rows are left", at(-10),
			func(s *Span) { s.Note(9, row(-1)); s.Cover(Group{Prios: []int8{9}}, false) },
			map[int]time.Time{9: settled}},
		{"a read cut inside a priority rests below that priority's first row", at(-10),
			func(s *Span) {
				s.Note(9, row(-8))
				s.Note(8, row(-7))
				s.Note(8, row(-6))
				s.Cover(Group{Prios: []int8{9, 8, 7}}, true)
			},
			map[int]time.Time{9: at(-8).Add(-100 * time.Nanosecond), 8: at(-7).Add(-100 * time.Nanosecond)}},
		{"floors never go down", at(-1),
			func(s *Span) { s.Note(5, row(-5)); s.Cover(Group{Prios: []int8{5}}, false) },
			nil},
		{"priorities not read do not move", at(-10),
			func(s *Span) { s.Cover(Group{Prios: []int8{3}}, false) },
			map[int]time.Time{3: settled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newTestPlan(t0, 0)
			pt := part(b0, 0)
			p.StartFloors(&pt, storedAt(tc.start))
			require.Equal(t, same(tc.start), floorTimes(p, &pt))
			s := NewSpan(readAt)
			tc.read(&s)
			p.Read(&pt, s)
			want := same(tc.start)
			for prio, w := range tc.want {
				want[prio] = w
			}
			require.Equal(t, want, floorTimes(p, &pt))
		})
	}
}

// A swap deletes every row it read: the priority it stopped in rests at its last row
// consumed, and the others it read in full at readAt less the skew; the floors it
// records are those it leaves in the plan.
func TestSwapFloors(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	pt := part(b0, 0)
	p.StartFloors(&pt, nil)
	s := NewSpan(at(0))
	last := shard.NewID(at(-6))
	s.Note(9, shard.NewID(at(-8)))
	s.Note(8, last)
	s.Cover(Group{Prios: AllPriorities}, true)
	stored := p.SwapFloors(&pt, s)
	require.Equal(t, same(shard.MinIDTime), floorTimes(p, &pt), "recording floors moves none")
	p.Swapped(&pt, s)
	want := same(shard.MinIDTime)
	want[9] = at(-2)
	want[8] = at(-6)
	require.Equal(t, want, floorTimes(p, &pt))
	require.Len(t, stored, NPriorities)
	require.Equal(t, last, stored[8])
	for prio, id := range stored {
		require.Equal(t, want[prio], shard.IDTime(id), "priority %d", prio)
	}
}

// Priorities whose floors lie within the skew of each other are read together from the
// lowest; a priority drained far behind gets its own read. A partition without floors is
// peeked from its bucket's start.
func TestGroups(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	pt := part(b0, 0)
	groups, known := p.PeekGroups(&pt)
	require.False(t, known)
	require.Equal(t, []Group{{Prios: AllPriorities, Floor: shard.MinID(testLayout.BucketStart(b0))}}, groups)

	stored := map[int8]uuid.UUID{}
	for prio := range NPriorities {
		stored[int8(prio)] = shard.MinID(at(-1))
	}
	stored[4] = shard.MinID(at(-60)) // a backlog
	stored[3] = shard.MinID(at(-2.5))
	p.StartFloors(&pt, stored)
	groups, known = p.PeekGroups(&pt)
	require.True(t, known)
	require.Equal(t, []Group{
		{Prios: []int8{9, 8, 7, 6, 5}, Floor: shard.MinID(at(-1))},
		{Prios: []int8{4}, Floor: shard.MinID(at(-60))},
		{Prios: []int8{3, 2, 1, 0}, Floor: shard.MinID(at(-2.5))},
	}, groups)
	require.Equal(t, groups, p.TakeGroups(&pt))
}

// A past bucket is finished once a peek found nothing of its lap and it ended more than
// the skew ago; a finished partition written into is read once from its bucket's start
// for a late row, again only when its signal cell changed.
func TestPeeked(t *testing.T) {
	t.Parallel()
	ended := testLayout.BucketStart(b0).Add(testSkew) // when bucket b0-1 counts as ended
	for _, tc := range []struct {
		name      string
		now       time.Time
		bucket    int64
		rows      []float64 // row times, seconds from t0
		cut       bool
		known     bool
		touched   bool
		finished  bool
		checkLate bool
		avail     int
		next      time.Time
	}{
		{name: "ended and empty", now: ended, bucket: b0 - 1, known: true, touched: true, finished: true, checkLate: true},
		{name: "within the skew of its end", now: ended.Add(-time.Nanosecond), bucket: b0 - 1, known: true, touched: true},
		{name: "the current bucket", now: t0, bucket: b0, known: true, touched: true},
		{name: "rows due", now: ended, bucket: b0 - 1, rows: []float64{-20, -19}, known: true, touched: true, avail: 2},
		{name: "a row coming due", now: t0, bucket: b0, rows: []float64{3}, known: true, touched: true, next: at(3)},
		{name: "cut before any row visible: look again now", now: ended, bucket: b0 - 1, rows: []float64{30}, cut: true,
			known: true, touched: true, next: ended},
		{name: "untouched: no late row to look for", now: ended, bucket: b0 - 1, known: true, finished: true},
		{name: "without floors: no late row to look for", now: ended, bucket: b0 - 1, touched: true, finished: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newTestPlan(t0, 0)
			pt := part(tc.bucket, 0)
			pt.Ahead = false
			if tc.known {
				p.StartFloors(&pt, nil)
			}
			s := NewSpan(tc.now)
			for _, sec := range tc.rows {
				id := shard.NewID(at(sec))
				s.Note(9, id)
				pt.See(id, tc.now)
			}
			s.Cover(Group{Prios: AllPriorities}, tc.cut)
			require.Equal(t, tc.checkLate, p.Peeked(&pt, s, tc.known, tc.touched, tc.now))
			require.Equal(t, tc.finished, pt.Finished)
			require.Equal(t, tc.avail, pt.Avail)
			require.Equal(t, tc.next, pt.Next)
		})
	}
}

// The late-row check of a finished partition runs once per value of its signal cell as
// the sweeps read it; a row it finds lowers the floors below it and unfinishes the
// partition.
func TestLateRowCheck(t *testing.T) {
	t.Parallel()
	now := testLayout.BucketStart(b0).Add(testSkew)
	p := newTestPlan(t0, 0)
	pt := part(b0-1, 0)
	p.StartFloors(&pt, nil)
	peek := func() bool {
		pt.Finished, pt.Avail = false, 0
		s := NewSpan(now)
		s.Cover(Group{Prios: AllPriorities}, false)
		return p.Peeked(&pt, s, true, true, now)
	}
	require.True(t, peek())
	require.False(t, peek(), "checked already for this cell")

	// A sweep reads the cell with a new touch: check again.
	p.Swept(now, 0, map[Cell]Slots{pt.cell(): {3: shard.NewID(at(-13))}}, nil)
	require.True(t, peek())
	p.LateRow(&pt, at(-13))
	require.False(t, pt.Finished)
	require.Equal(t, 1, pt.Avail)
	require.Equal(t, same(at(-13).Add(-100*time.Nanosecond)), floorTimes(p, &pt))
	require.False(t, peek())
}

// Late lowers a partition's floors below the late rows, moves its shard's cursor back to
// its bucket and marks it to be read by the next idle scan. A partition without floors
// gets floors a lap below its bucket, since floors others recorded may lie above the rows.
func TestLate(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	parts := p.Candidates(t0)
	for i := range parts {
		parts[i].Finished = parts[i].Bucket < b0
	}
	p.Advance(parts, t0)
	require.Equal(t, []int64{b0, b0}, p.Cursors())

	known, unknown := part(b0-2, 0), part(b0-1, 1)
	p.StartFloors(&known, map[int8]uuid.UUID{9: shard.MinID(at(-1))})
	s := NewSpan(at(0))
	s.Cover(Group{Prios: AllPriorities}, false)
	p.Read(&known, s)
	p.Late(map[Cell]time.Time{known.cell(): at(-22), unknown.cell(): at(-12)})

	require.Equal(t, []int64{b0 - 2, b0 - 1}, p.Cursors())
	require.Equal(t, same(at(-22).Add(-100*time.Nanosecond)), floorTimes(p, &known))
	require.Equal(t, same(testLayout.BucketStart(b0-1-4)), floorTimes(p, &unknown))
	require.True(t, p.comingDue(&known, t0))
	require.True(t, p.comingDue(&unknown, t0))
}

// A sweep is due on the first call and then once per SweepInterval; the sweep that
// follows one judges touches against what that one saw and the cursors it saw.
func TestSweepDue(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	require.True(t, p.SweepDue(t0))
	late, unsure := p.Swept(t0, 0, map[Cell]Slots{}, nil)
	require.Empty(t, late)
	require.Empty(t, unsure)
	require.False(t, p.SweepDue(t0.Add(SweepInterval-time.Nanosecond)))
	require.True(t, p.SweepDue(t0.Add(SweepInterval)))

	// A bucket the cursor had passed by the last sweep, touched since: late from the
	// slot's start.
	parts := p.Candidates(t0)
	for i := range parts {
		parts[i].Finished = parts[i].Bucket < b0
	}
	p.Advance(parts, t0)
	now := t0.Add(SweepInterval)
	p.Swept(now, 0, map[Cell]Slots{}, nil)
	cell := Cell{Bucket: b0 - 1, Shard: 1}
	late, unsure = p.Swept(now.Add(SweepInterval), 0, map[Cell]Slots{cell: {2: shard.NewID(at(-14))}},
		map[Entry]time.Time{{Cell: cell, Slot: 2}: now})
	require.Equal(t, map[Cell]time.Time{cell: signal.SlotStart(testLayout, b0-1, 2)}, late)
	require.Empty(t, unsure)
}

// An idle scan reads every partition once per half LookAhead (or when the signal cells
// cannot be read), and in between only those coming due or whose cell changed since the
// last full scan. A partition nothing was written into this lap and whose floors are
// set, or that lies ahead, is not read.
func TestIdleReads(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	parts := p.Candidates(t0) // shard 0: b0-3..b0+1 (indexes 0..4), then shard 1 (5..9)
	cur := part(b0, 0)        // index 3, floors set, touched
	quiet := part(b0-1, 0)    // index 2, floors set, untouched
	p.StartFloors(&cur, nil)
	p.StartFloors(&quiet, nil)
	cells := Cells{}
	for _, pt := range parts {
		if pt.Key != quiet.Key && !pt.Ahead {
			cells[pt.cell()] = shard.NewID(at(-1))
		}
	}
	ahead := part(b0+1, 1)
	cells[ahead.cell()] = shard.NewID(at(7))

	read, full := p.IdleReads(parts, t0, cells, true, t0)
	require.True(t, full)
	require.Equal(t, []int{0, 1, 3, 5, 6, 7, 8, 9}, read, "all but the quiet one and the untouched ahead one")
	require.True(t, parts[2].Finished, "the quiet one ended, and nothing was written into it")
	require.False(t, parts[4].Finished, "a bucket ahead is never finished")

	// Between full scans: only partitions coming due or touched since.
	parts[3].Next = at(1) // seen coming due at t0+1
	parts[5].Err = errSome
	p.NoteUpcoming(parts, read, full)
	p.Candidates(t0)
	parts = p.Candidates(t0) // back to shard 0 first
	cells2 := maps.Clone(cells)
	touchedSince := part(b0-2, 0)
	cells2[touchedSince.cell()] = shard.NewID(at(1.5)) // touched since
	read, full = p.IdleReads(parts, at(1), cells2, true, at(1))
	require.False(t, full)
	require.Equal(t, []int{1, 3, 5}, read)

	// Half LookAhead on, or without cells, a full scan again.
	_, full = p.IdleReads(p.Candidates(t0), at(2.5), cells2, true, at(2.5))
	require.True(t, full)
	_, full = p.IdleReads(p.Candidates(t0), at(2.6), nil, true, at(2.6))
	require.True(t, full)
}

// A partition of a current bucket that has no floors in its lap yet is read from its
// stored floors (for rows left from earlier laps), unless the plan read it before and the
// cells of both its bucket and the bucket a lap before show no touch: writers touch a
// cell before their first row into it (signal.Announcer), so neither holds a row, and
// older ones were found by the earlier read. Cells that could not be read, or were not
// read that far back, or may have expired, prove nothing; nor do they for a partition the
// plan never read, whose rows may be laps old.
func TestQuietPartitionsNotRead(t *testing.T) {
	t.Parallel()
	p := newTestPlan(t0, 0)
	parts := p.Candidates(t0) // shard 0: b0-3..b0+1 (indexes 0..4), then shard 1 (5..9)
	_, _, ok := p.Lookback(parts, t0)
	require.False(t, ok, "nothing read yet: no partition can be quiet")
	current, _ := Split(parts)
	read, _ := p.IdleReads(parts, t0, Cells{}, false, t0)
	require.Subset(t, read, current, "never read: every current partition is read")
	for _, i := range current {
		p.Read(&parts[i], NewSpan(t0)) // as its read does
	}

	p.Candidates(t0)
	parts = p.Candidates(t0) // back to shard 0 first
	from, to, ok := p.Lookback(parts, t0)
	require.True(t, ok)
	require.Equal(t, []int64{b0 - 3 - 4, b0 - 4}, []int64{from, to}, "a lap before the current buckets")
	cells := Cells{Cell{b0 - 1 - int64(testLayout.BucketCount), 1}: shard.NewID(at(-45))} // b0-1, shard 1 (index 7): a row a lap before
	read, full := p.IdleReads(parts, t0.Add(testLayout.BucketDuration/2), cells, true, t0)
	require.True(t, full)
	require.Equal(t, []int{7}, read, "only the partition whose bucket a lap before was touched")
	require.True(t, parts[0].Finished, "an ended bucket with nothing written is finished")
	p.StartFloors(&parts[7], nil) // as its read does

	// Found quiet, a partition stays so for its lap, whatever is read later.
	parts = p.Candidates(t0)
	_, _, ok = p.Lookback(parts, t0)
	require.False(t, ok, "no partition left to look back for")
	read, _ = p.IdleReads(parts, t0, Cells{}, false, t0)
	require.Empty(t, read)

	// A touch of its own bucket has it read, by the next full scan.
	parts = p.Candidates(t0)
	read, _ = p.IdleReads(parts, at(3), Cells{Cell{b0, 0}: shard.NewID(at(3))}, false, at(3))
	require.Equal(t, []int{3}, read)

	for _, tc := range []struct {
		name       string
		cells      Cells
		lookedBack bool
		l          shard.Layout
	}{
		{"cells unread", nil, true, testLayout},
		{"not read a lap back", Cells{}, false, testLayout},
		{"a lap longer than cells live", Cells{}, true, shard.Layout{Queue: "q", BucketCount: 4, BucketDuration: 7 * time.Hour, ShardCount: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Config{Layout: tc.l, Skew: testSkew, LookAhead: 5 * time.Second, MaxTakeBytes: 4 << 20, MaxPageRows: 1000,
				SlotStart: func(b int64, slot int) time.Time { return signal.SlotStart(tc.l, b, slot) }}, t0, 0)
			parts := p.Candidates(t0)
			current, _ := Split(parts)
			read, _ := p.IdleReads(parts, t0, tc.cells, tc.lookedBack, t0)
			require.Subset(t, read, current, "every current partition")
		})
	}
}

// A consumer away longer than a lap (paused, or its lap shorter than its idle interval)
// comes back to partitions that held a bucket its cursor had not passed: an idle scan
// reads each of them once in its lap, even between full scans and with its cell
// untouched in this lap, since rows of the lap it missed may wait there.
func TestLappedPartitionsRead(t *testing.T) {
	t.Parallel()
	p := New(Config{Layout: testLayout, Skew: testSkew, LookAhead: 2 * time.Minute, MaxTakeBytes: 4 << 20,
		MaxPageRows: 1000, SlotStart: func(b int64, slot int) time.Time { return signal.SlotStart(testLayout, b, slot) },
	}, t0, 0)
	parts := p.Candidates(t0)
	for _, pt := range parts {
		require.False(t, pt.Lapped, "nothing is lapped within the cursor's lap: %s", pt.Key)
	}
	_, full := p.IdleReads(parts, t0, Cells{}, true, t0)
	require.True(t, full)

	now := at(42) // bucket b0+4: the ring came round to every partition of the cursor's lap
	parts = p.Candidates(now)
	var current []int
	for i, pt := range parts {
		require.Equal(t, !pt.Ahead, pt.Lapped, pt.Key)
		if !pt.Ahead {
			current = append(current, i)
		}
	}
	read, full := p.IdleReads(parts, now, Cells{}, true, now)
	require.False(t, full, "within half LookAhead of the last full scan")
	require.Equal(t, current, read, "every lapped partition, though no cell shows a write")

	p.StartFloors(&parts[current[0]], nil)
	read, _ = p.IdleReads(parts, now, Cells{}, true, now)
	require.Equal(t, current[1:], read, "not one read in this lap already")
}
