package scanplan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// sweepCase builds the state of a consumer that read a partition of bucket b up to now
// (its floors rest at now less the skew), with one cell of b touched since the last sweep.
type sweepCase struct {
	st   sweepState
	cell Cell
	b    int64
	now  time.Time
}

func newSweepCase(t *testing.T, offset time.Duration) *sweepCase {
	t.Helper()
	q := shardqtype.QueueConfig{Name: "q", BucketCount: 120, BucketDuration: 10 * time.Second, ShardCount: 2}
	l := q.Layout()
	now := time.Date(2026, 11, 25, 12, 0, 38, 0, time.UTC) // 8 s into its bucket
	b := l.Bucket(now)
	var f floors
	for p := range f {
		f[p] = shard.MinID(now.Add(-2 * time.Second))
	}
	cell := Cell{Bucket: b, Shard: 1}
	return &sweepCase{
		st: sweepState{
			layout: l, skew: 2 * time.Second, offset: offset,
			slotStart: func(b int64, slot int) time.Time { return signal.SlotStart(l, b, slot) },
			cells:     map[Cell]Slots{cell: {}}, touched: map[Entry]time.Time{},
			last: map[Cell]Slots{}, lateBefore: now.Add(-12 * time.Second),
			passed: []int64{b, b}, cursors: []int64{b, b},
			floors: map[pkey]*floors{{l.Key(b, 1), b}: &f},
		},
		cell: cell, b: b, now: now,
	}
}

// touch records that slot's entry now holds a row of time at, touched at touched by the
// cluster's clock.
func (c *sweepCase) touch(slot int, at, touched time.Time) {
	c.st.cells[c.cell][slot] = shard.NewID(at)
	c.st.touched[Entry{Cell: c.cell, Slot: slot}] = touched
}

func (c *sweepCase) slotStart(slot int) time.Time {
	return c.st.slotStart(c.b, slot)
}

// A slot whose rows lie below the floors but whose last touch came within half the skew
// of its start was written before any read that raised the floors past it: a consumer
// under steady load must not read every partition again at every sweep.
func TestSweepTakesOnTimeTouchesBelowFloorsForOnTime(t *testing.T) {
	t.Parallel()
	c := newSweepCase(t, 0)
	for slot := range 4 { // the bucket's first 2 s, each slot touched just after it ended
		start := c.slotStart(slot)
		c.touch(slot, start.Add(10*time.Millisecond), start.Add(signal.SlotWidth+50*time.Millisecond))
	}
	late, unsure := lateSlots(c.st)
	require.Empty(t, late)
	require.Empty(t, unsure)
}

// A trailing writer's touch of a past slot is its last touch, whatever row time it
// carries, and came long after the slot began: late, and the floors go below the slot.
func TestSweepFindsALateTouchBelowFloors(t *testing.T) {
	t.Parallel()
	c := newSweepCase(t, 0)
	c.touch(0, c.slotStart(0).Add(100*time.Millisecond), c.slotStart(0).Add(600*time.Millisecond))
	c.touch(2, c.slotStart(2).Add(400*time.Millisecond), c.slotStart(2).Add(4*time.Second))
	late, unsure := lateSlots(c.st)
	require.Equal(t, map[Cell]time.Time{c.cell: c.slotStart(2)}, late)
	require.Empty(t, unsure)
}

// A late touch of rows above the floors may follow an earlier late touch of rows below
// them in the same slot, whose entry it replaced: the slot's start decides.
func TestSweepLooksBelowTheLastTouchesRows(t *testing.T) {
	t.Parallel()
	c := newSweepCase(t, 0)
	const slot = 10
	floor := c.slotStart(slot).Add(200 * time.Millisecond)
	for _, f := range c.st.floors {
		for p := range f {
			f[p] = shard.MinID(floor)
		}
	}
	c.touch(slot, floor.Add(100*time.Millisecond), floor.Add(3*time.Second))
	late, _ := lateSlots(c.st)
	require.Equal(t, map[Cell]time.Time{c.cell: c.slotStart(slot)}, late)
}

// An entry the last sweep read already is not looked at again, however late its touch.
func TestSweepSkipsEntriesSeenBefore(t *testing.T) {
	t.Parallel()
	c := newSweepCase(t, 0)
	c.touch(1, c.slotStart(1), c.slotStart(1).Add(5*time.Second))
	c.st.last[c.cell] = Slots{1: c.st.cells[c.cell][1]}
	late, unsure := lateSlots(c.st)
	require.Empty(t, late)
	require.Empty(t, unsure)
}

// Touches are stamped by the cluster's clock and slots placed by the consumer's: a
// consumer clock three days behind (as tests' manual clocks are) judges the same touches
// the same way.
func TestSweepJudgesTouchesByTheClusterOffset(t *testing.T) {
	t.Parallel()
	const behind = -72 * time.Hour
	c := newSweepCase(t, behind)
	c.touch(0, c.slotStart(0), c.slotStart(0).Add(600*time.Millisecond-behind))
	c.touch(3, c.slotStart(3), c.slotStart(3).Add(3*time.Second-behind))
	late, _ := lateSlots(c.st)
	require.Equal(t, map[Cell]time.Time{c.cell: c.slotStart(3)}, late)
}

// A bucket passed since the last sweep and touched late in several slots needs one read
// to tell whether the pass saw the rows, not one per slot; one passed by the last sweep is
// late outright.
func TestSweepReadsAPassedBucketOnce(t *testing.T) {
	t.Parallel()
	c := newSweepCase(t, 0)
	c.st.floors = map[pkey]*floors{}
	c.st.lateBefore = c.slotStart(0).Add(-time.Hour)
	c.st.passed, c.st.cursors = []int64{c.b, c.b}, []int64{c.b + 1, c.b + 1}
	for slot := range 5 {
		c.touch(slot, c.slotStart(slot), c.slotStart(slot).Add(3*time.Second))
	}
	late, unsure := lateSlots(c.st)
	require.Empty(t, late)
	require.Equal(t, map[Cell]bool{c.cell: true}, unsure)

	c.st.passed = []int64{c.b + 1, c.b + 1}
	late, unsure = lateSlots(c.st)
	require.Equal(t, map[Cell]time.Time{c.cell: c.slotStart(0)}, late)
	require.Empty(t, unsure)
}
