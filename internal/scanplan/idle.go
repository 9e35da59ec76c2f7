package scanplan

import (
	"time"

	"github.com/shardq/shardq/internal/signal"
)

// Untouched reports whether cells (when known) show that nothing was written into pt in
// its lap: no task, no marker, so no swap either.
func (cells Cells) Untouched(pt *Part) bool {
	_, ok := cells[pt.cell()]
	return cells != nil && !ok
}

// Split returns the indexes of parts in buckets up to now (current) and after (ahead).
func Split(parts []Part) (current, ahead []int) {
	for i, pt := range parts {
		if pt.Ahead {
			ahead = append(ahead, i)
		} else {
			current = append(current, i)
		}
	}
	return current, ahead
}

// IdleReads chooses which of parts an idle scan at now reads, current buckets first, given
// the signal cells of their buckets (nil if they could not be read) and, when lookedBack,
// of the buckets Lookback returned, as read at cellsAt (no later than the read was sent);
// full reports a full scan. Every task and marker
// write touches its signal cell, and is sent only once its cell was touched
// (signal.Announcer), so a cell that shows no touch proves its partition holds no row of
// its bucket. A look-ahead partition whose cell was not touched holds nothing of its lap;
// a current one cannot have floors recorded for this lap, which saves reading them, and
// is not read at all when the cell of its partition's bucket a lap before shows no touch
// either: a first read of a partition in a lap reads from that bucket's start on, for
// rows written late in the lap before. Between full scans (one per half LookAhead), only
// partitions with a row the last full scan saw coming due, or whose cell changed since,
// are read: rows written since were touched, and earlier ones due before the next full
// scan were seen. That holds of the lap the cells are read for: a Lapped partition not yet
// read in this lap is read, for rows written into a lap the scans missed. Parts not read
// get what is known of them (Finished, Next).
func (p *Plan) IdleReads(parts []Part, now time.Time, cells Cells, lookedBack bool, cellsAt time.Time) (read []int, full bool) {
	full = p.fullScan(now, cells)
	current, ahead := Split(parts)
	for _, i := range append(current, ahead...) {
		pt := &parts[i]
		switch {
		case p.comingDue(pt, now), pt.Lapped && !p.HasFloors(pt):
			read = append(read, i)
		case cells.Untouched(pt) && (pt.Ahead || p.HasFloors(pt) || p.quietLap(pt, now, cells, lookedBack)):
			// Nothing was written into it this lap, and rows left from the last lap
			// were looked for when it was first read, or none were written: there is
			// nothing to read. Ended as of when the cells were read: a write on time
			// into its bucket may come later than that.
			pt.Finished = p.Ended(pt, cellsAt)
		case full || p.changedSinceScan(cells, pt):
			read = append(read, i)
		default:
			pt.Next = p.upcomingOf(pt)
		}
	}
	return read, full
}

// Lookback returns the buckets, from..to, whose signal cells an idle scan of parts at now
// reads besides theirs, when there are any (ok): the buckets a lap before its current
// partitions that have no floors in this lap and are not known quiet (quietLap).
func (p *Plan) Lookback(parts []Part, now time.Time) (from, to int64, ok bool) {
	for _, pt := range parts {
		if pt.Ahead || pt.Lapped || p.HasFloors(&pt) || p.knownQuiet(&pt) || !p.ruledOut(&pt) || !p.cellLives(pt.Bucket, now) {
			continue
		}
		b := pt.Bucket - int64(p.cfg.Layout.BucketCount)
		if !ok || b < from {
			from = b
		}
		if !ok || b > to {
			to = b
		}
		ok = true
	}
	return from, to, ok
}

// quietLap reports whether pt, a current partition without floors in this lap whose cell
// shows no touch, held no row of the bucket a lap before either: that bucket's cell, read
// with cells (lookedBack), shows no touch and still lives. Rows of earlier laps are ruled
// out for a partition this plan has read from its floors before (in any lap), as that
// read found every row left then, and since, each lap's first look at it read it or found
// it quiet; or by its shard's pass mark (StartPassed). Others are read, and one that
// failed is read again. A partition found quiet stays so for its lap: a row of that
// bucket written later would come from a writer a lap behind.
func (p *Plan) quietLap(pt *Part, now time.Time, cells Cells, lookedBack bool) bool {
	if pt.Ahead || pt.Lapped {
		return false
	}
	if p.knownQuiet(pt) {
		return true
	}
	if !p.ruledOut(pt) {
		return false
	}
	before := pt.Bucket - int64(p.cfg.Layout.BucketCount)
	if cells == nil || !lookedBack || !p.cellLives(pt.Bucket, now) {
		return false
	}
	if _, ok := cells[Cell{before, pt.Shard}]; ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quiet[pt.pkey()] = true
	return true
}

// ruledOut reports whether rows of laps before the one before pt's are ruled out: this
// plan read pt from its floors before, or pt's shard's pass mark covers them.
func (p *Plan) ruledOut(pt *Part) bool {
	p.mu.Lock()
	read := p.everRead[pt.Key]
	p.mu.Unlock()
	return read || p.covered(pt)
}

func (p *Plan) knownQuiet(pt *Part) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quiet[pt.pkey()]
}

// cellLives reports whether the cell of the bucket a lap before bucket can prove its
// partition quiet at now: it is still kept (with an hour to spare for clocks; one that
// expired shows no touch, proving nothing), and the lap is long enough that no writer
// within the skew can still write into it.
func (p *Plan) cellLives(bucket int64, now time.Time) bool {
	l := p.cfg.Layout
	if l.Lap() < 2*(p.cfg.Skew+l.BucketDuration) {
		return false
	}
	return now.Before(l.BucketStart(bucket - int64(l.BucketCount) + 1).Add(signal.CellLife - time.Hour))
}

// fullScan decides whether an idle scan reads every candidate partition, and records
// the signal cells it starts from when it does.
func (p *Plan) fullScan(now time.Time, cells Cells) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cells != nil && !p.fullAt.IsZero() && now.Before(p.fullAt.Add(p.cfg.LookAhead/2)) {
		return false
	}
	p.fullAt, p.fullCells = now, cells
	return true
}

// changedSinceScan reports whether pt's signal cell was touched since the last full scan.
func (p *Plan) changedSinceScan(cells Cells, pt *Part) bool {
	v, ok := cells[pt.cell()]
	p.mu.Lock()
	defer p.mu.Unlock()
	return ok && p.fullCells[pt.cell()] != v
}

// comingDue reports whether a scan saw a row of pt becoming visible by now.
func (p *Plan) comingDue(pt *Part, now time.Time) bool {
	next := p.upcomingOf(pt)
	return !next.IsZero() && !next.After(now)
}

func (p *Plan) upcomingOf(pt *Part) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upcoming[pt.pkey()]
}

// NoteUpcoming records when the next row of each partition an idle scan read (read, as
// IdleReads returned it) becomes visible; a full scan starts the record afresh.
func (p *Plan) NoteUpcoming(parts []Part, read []int, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if full {
		clear(p.upcoming)
	}
	for _, i := range read {
		pt := &parts[i]
		switch {
		case pt.Err != nil:
			p.upcoming[pt.pkey()] = revisit
		case pt.Next.IsZero():
			delete(p.upcoming, pt.pkey())
		default:
			p.upcoming[pt.pkey()] = pt.Next
		}
	}
}

// Backlogged reports whether a peek of the partitions current saw as many rows visible
// as it reads (PeekLimit), so perhaps more, and marks those due now. Their takes go back
// in line for more, so the call fills up and NextDue does not matter; looking ahead would
// only read the tombstones of the leases acked since, in the current buckets, once per
// call of a drain.
func Backlogged(parts []Part, current []int, now time.Time) bool {
	more := false
	for _, i := range current {
		if parts[i].Avail >= PeekLimit {
			parts[i].Next, more = now, true
		}
	}
	return more
}
