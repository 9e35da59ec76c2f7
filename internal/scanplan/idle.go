package scanplan

import "time"

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
// the signal cells of their buckets (nil if they could not be read); full reports a full
// scan. Every task and marker write touches its signal cell. A look-ahead partition whose
// cell was not touched holds nothing of its lap; a current one cannot have floors recorded
// for this lap, which saves reading them. Between full scans (one per half LookAhead),
// only partitions with a row the last full scan saw coming due, or whose cell changed
// since, are read: rows written since were touched, and earlier ones due before the next
// full scan were seen. That holds of the lap the cells are read for: a Lapped partition
// not yet read in this lap is read, for rows written into a lap the scans missed. Parts
// not read get what is known of them (Finished, Next).
func (p *Plan) IdleReads(parts []Part, now time.Time, cells Cells) (read []int, full bool) {
	full = p.fullScan(now, cells)
	current, ahead := Split(parts)
	for _, i := range append(current, ahead...) {
		pt := &parts[i]
		switch {
		case p.comingDue(pt, now), pt.Lapped && !p.HasFloors(pt):
			read = append(read, i)
		case cells.Untouched(pt) && (pt.Ahead || p.HasFloors(pt)):
			// Nothing was written into it this lap, and rows left from the last lap
			// were looked for when it was first read: there is nothing to read.
			pt.Finished = p.Ended(pt, now)
		case full || p.changedSinceScan(cells, pt):
			read = append(read, i)
		default:
			pt.Next = p.upcomingOf(pt)
		}
	}
	return read, full
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
