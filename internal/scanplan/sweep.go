package scanplan

import (
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// Slots are a signal cell's per-slot entries as read: per slot, the earliest row time of
// its last touch.
type Slots map[int]uuid.UUID

// Entry is one slot of a signal cell.
type Entry struct {
	Cell
	Slot int
}

// clockError bounds how far the cluster's time as a writer estimated it (internal/clustertime),
// which its rows' times come from, may lie from the coordinators' clocks that stamp touches.
const clockError = 100 * time.Millisecond

// SweepDue reports whether a call at now should sweep: once per SweepInterval, and on
// the first call.
func (p *Plan) SweepDue(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cells == nil || !now.Before(p.swept.Add(SweepInterval))
}

// LastSweep is when the last sweep's cells were read (zero before the first).
func (p *Plan) LastSweep() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swept
}

// Swept takes in a sweep at now of the lap's signal cells (cells, and when each slot was
// touched by the cluster's clock), offset being the consumer's clock less the cluster's.
// It returns, per cell, where its floors must go below for a late write (late), and the
// cells passed since the last sweep and written into after their slot could still be
// written on time, which only a read tells (unsure). Pass what the reads find, with late,
// to Late.
//
// Every write touches the entry of its cell's slot with the earliest row time it wrote,
// and an entry keeps the touch made last in real time, so once per SweepInterval one read
// of the lap's cells shows each slot written since the last sweep, and when it was touched
// last. Floors rest at least the skew below the reading consumer's clock, which is within
// half of it from the cluster's, so a slot last touched within half the skew of its start
// holds no row written after a read that passed it. One touched later may hold a late
// write if the floors for its partition lie above the slot's start, or its bucket was
// passed by the cursor by the last sweep, or (for a partition without floors) it starts
// before the last sweep less the skew. (A touch that failed is retried until it applies,
// signal.Toucher; a write whose writer died before that is found when the ring comes back
// to its partition.)
func (p *Plan) Swept(now time.Time, offset time.Duration, cells map[Cell]Slots, touched map[Entry]time.Time) (late map[Cell]time.Time, unsure map[Cell]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, lateBefore, passed := p.cells, p.swept.Add(-p.cfg.Skew), p.sweptCursors
	p.cells, p.swept, p.sweptCursors = cells, now, append([]int64(nil), p.cursors...)
	return lateSlots(sweepState{
		layout: p.cfg.Layout, slotStart: p.cfg.SlotStart, skew: p.cfg.Skew, offset: offset,
		cells: cells, touched: touched, last: last, lateBefore: lateBefore,
		passed: passed, cursors: p.cursors, floors: p.floors,
	})
}

// Late sends the next scan back to the cells of late, each to be read from below the
// time given: the partition's floors are lowered below it, and its shard's cursor moved
// back to its bucket, and its pass mark with it. An idle scan reads, between full scans,
// only partitions marked or whose cell changed since the last full one, which a late
// write may not have: they are marked.
func (p *Plan) Late(late map[Cell]time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.cfg.Layout
	for cell, at := range late {
		k := cell.key(l)
		below := justBelow(at)
		if _, ok := p.floors[k]; !ok {
			// Floors recorded by others may lie above the late rows: read the lap.
			below = minID(below, shard.MinID(l.BucketStart(cell.Bucket-int64(l.BucketCount))))
			p.floors[k] = &floors{}
		}
		f := p.floors[k]
		for i := range f {
			if f[i] == (uuid.UUID{}) {
				f[i] = below
			} else {
				f[i] = minID(f[i], below)
			}
		}
		p.cursors[cell.Shard] = min(p.cursors[cell.Shard], cell.Bucket)
		p.passed[cell.Shard] = min(p.passed[cell.Shard], cell.Bucket)
		p.upcoming[k] = revisit
		delete(p.known, k)
	}
}

// sweepState is what a sweep decides from: the lap's cells as just read (cells, and when
// each slot was touched by the cluster's clock), as the last sweep read them (last), and
// the consumer's cursors, floors and clock offset from the cluster's.
type sweepState struct {
	layout     shard.Layout
	slotStart  func(bucket int64, slot int) time.Time
	skew       time.Duration // MaxClockSkew
	offset     time.Duration // the consumer's clock less the cluster's
	cells      map[Cell]Slots
	touched    map[Entry]time.Time
	last       map[Cell]Slots
	lateBefore time.Time // the last sweep less skew
	passed     []int64   // the cursors at the last sweep
	cursors    []int64
	floors     map[pkey]*floors
}

// lateSlots decides a sweep: see Swept.
func lateSlots(st sweepState) (late map[Cell]time.Time, unsure map[Cell]bool) {
	late, unsure = map[Cell]time.Time{}, map[Cell]bool{}
	for cell, slots := range st.cells {
		if st.last == nil || cell.Shard >= len(st.cursors) {
			continue // a new consumer reads every partition of the lap whose cells show a touch
		}
		f, haveFloors := st.floors[cell.key(st.layout)]
		for slot, v := range slots {
			start := st.slotStart(cell.Bucket, slot)
			touched := st.touched[Entry{Cell: cell, Slot: slot}].Add(st.offset)
			if st.last[cell][slot] == v || !touched.After(start.Add(st.skew/2-clockError)) {
				continue // not touched since the last sweep, or on time
			}
			switch {
			case cell.Bucket < st.passed[cell.Shard],
				haveFloors && f.above(start),
				!haveFloors && start.Before(st.lateBefore):
				// Written into a bucket the cursor had passed by the last sweep, or where
				// the floors may lie above its rows: late. The entry holds the last touch of
				// its slot, whose rows may lie above an earlier late touch's, so the slot's
				// start decides, and the floors go below it.
				if t, ok := late[cell]; !ok || start.Before(t) {
					late[cell] = start
				}
			case cell.Bucket < st.cursors[cell.Shard]:
				// Passed since the last sweep: the write may have come before the pass (and
				// been read by it) or after.
				unsure[cell] = true
			}
		}
	}
	for cell := range late {
		delete(unsure, cell)
	}
	return late, unsure
}
