package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/shard"
)

// The scan reads what its plan (package scanplan) says, from the read floors the plan
// keeps per partition and lap; see there for why reads cost the same however much a
// partition has drained. Floors are also written into the partition's lock row by every
// swap, in the same fenced transaction, so that another consumer (or this one after a
// restart) starts from them.

// loadFloors reads the floors the last swap of pt recorded, for a partition this
// consumer has none for, and starts from them (scanplan.Plan.StartFloors).
func (c *Consumer) loadFloors(ctx context.Context, pt *scanplan.Part) error {
	if c.plan.HasFloors(pt) {
		return nil
	}
	floors, err := c.leasing.Floors(ctx, pt.Key)
	if err != nil {
		return wrapErr("reading the floors of", pt.Key, err)
	}
	c.plan.StartFloors(pt, floors)
	return nil
}

// peek reads the IDs of pt's rows from its floors up to upper (now, or now plus the
// look-ahead): how many are visible now, when the next one becomes visible, and, for a
// bucket that ended more than MaxClockSkew ago, whether nothing of its lap is left.
// Look-ahead buckets are read from their own start and move no floor.
func (c *Consumer) peek(ctx context.Context, pt *scanplan.Part, now, upper time.Time, touched bool) error {
	s, _, known, err := c.peekRead(ctx, pt, now, upper)
	if err != nil {
		return err
	}
	if c.plan.Peeked(pt, s, known, touched, now) {
		c.lateRow(ctx, pt, now)
	}
	return nil
}

// peekRead reads the IDs of pt's rows from its floors up to upper, at most PeekLimit,
// counting them into pt (Avail, Next), and returns what it covered and when the rows seen
// become visible; known as scanplan.Plan.PeekGroups says.
func (c *Consumer) peekRead(ctx context.Context, pt *scanplan.Part, now, upper time.Time) (s scanplan.Span, seen []time.Time, known bool, err error) {
	s = scanplan.NewSpan(now)
	if c.failRead != nil {
		if err := c.failRead(pt.Key); err != nil {
			return s, nil, false, err
		}
	}
	groups, known := c.plan.PeekGroups(pt)
	read := 0
	for _, g := range groups {
		want := scanplan.PeekLimit - read
		refs, err := c.leasing.IDs(ctx, pt.Key, g.Prios, g.Floor, shard.MaxID(upper), want)
		for _, r := range refs {
			s.Note(r.Priority, r.ID)
			pt.See(r.ID, now)
			seen = append(seen, shard.IDTime(r.ID))
		}
		if err != nil {
			return s, nil, known, wrapErr("reading", pt.Key, err)
		}
		got := len(refs)
		read += got
		s.Cover(g, got == want)
		if s.Cut() {
			break
		}
	}
	return s, seen, known, nil
}

// peekAhead is peek for a busy call, of a partition of the current bucket, given the
// signal cells as read before the call's peeks: it reads KnowAhead past now and records
// the rows it saw coming due (scanplan.Plan.Know), so that the next calls need not peek pt
// again while its cell shows no write, nor a take of it that left rows. A read ahead that is cut may have counted rows
// coming due of a higher priority in place of due ones of a lower: pt is read again up to
// now, and is dense (taken without a peek) from then on.
func (c *Consumer) peekAhead(ctx context.Context, pt *scanplan.Part, now time.Time, touched bool, cells scanplan.Cells) error {
	until := now.Add(scanplan.KnowAhead)
	s, seen, known, err := c.peekRead(ctx, pt, now, until)
	if err != nil {
		return err
	}
	if s.Cut() {
		c.plan.Dense(pt, true)
		pt.Avail, pt.Next = 0, time.Time{}
		return c.peek(ctx, pt, now, now, touched)
	}
	c.plan.Peeked(pt, s, known, touched, now) // a bucket not ended: nothing to check for late rows
	c.plan.Know(pt, now, until, seen, cells)
	return nil
}

// lateRow reads a partition about to be passed from the start of its bucket (see
// scanplan.Plan.Peeked for how often): a row written later than MaxClockSkew into the
// bucket while it was being read lies below the floors, and its signal cell was touched
// again by on-time writes since, so no sweep can tell. A row found lowers the floors below
// it, and the partition is not passed. The read walks the bucket's tombstones once; when
// it fails, the partition is passed all the same, and such a row waits for the ring to
// come back.
func (c *Consumer) lateRow(ctx context.Context, pt *scanplan.Part, now time.Time) {
	at, ok, _ := c.firstVisible(ctx, pt, now)
	if !ok {
		return
	}
	c.plan.LateRow(pt, at)
	c.log.WarnContext(ctx, "a row was written later than MaxClockSkew; reading it", "queue", c.q.Name,
		"partition_key", pt.Key, "row_time", at)
}

// firstVisible reads the earliest row of pt's bucket visible at now, whatever the floors:
// it walks the bucket's tombstones once. A failed read is logged and returned.
func (c *Consumer) firstVisible(ctx context.Context, pt *scanplan.Part, now time.Time) (time.Time, bool, error) {
	refs, err := c.leasing.IDs(ctx, pt.Key, scanplan.AllPriorities, shard.MinID(c.layout.BucketStart(pt.Bucket)), shard.MaxID(now), 1)
	switch {
	case err != nil:
		c.log.WarnContext(ctx, "reading a partition for late rows", "queue", c.q.Name, "partition_key", pt.Key, "error", err)
		return time.Time{}, false, err
	case len(refs) == 0:
		return time.Time{}, false, nil
	}
	return shard.IDTime(refs[0].ID), true, nil
}

// peekAll peeks at the partitions of buckets up to now. A consumer whose last call found
// nothing reads up to LookAhead past now at once, and the look-ahead buckets with them,
// those the plan chooses from the signal cells (scanplan.Plan.IdleReads); one that was
// busy reads due rows only, and looks ahead only if it finds none: rows coming due later
// matter for NextDue, which matters only to a consumer about to go idle, and one that
// finds some is told to come back now. That look-ahead is returned to run, not run: it
// only sets the parts' Next, so it can run beside the takes. A partition that fails is
// skipped; the error returned is the joined failures when every partition failed.
func (c *Consumer) peekAll(ctx context.Context, parts []scanplan.Part, want int, now time.Time, idle bool) (look func(), err error) {
	current, ahead := scanplan.Split(parts)
	upper := now
	var cells, knowing scanplan.Cells
	full := true
	read := current
	if idle {
		upper = now.Add(c.cfg.LookAhead)
		var lookedBack bool
		var cellsAt time.Time
		cells, lookedBack, cellsAt = c.idleCells(ctx, parts, now)
		current, full = c.plan.IdleReads(parts, now, cells, lookedBack, cellsAt)
		read, ahead = current, nil
	} else {
		// Busy partitions of the current bucket are taken without a peek; quiet ones whose
		// cell shows no write since their last peek are counted from what it saw coming
		// due; the others are peeked, reading ahead.
		if c.plan.WantsCells(parts, now) {
			knowing = c.ownCells(ctx, parts)
		}
		read = c.plan.Known(parts, current, now, knowing)
	}
	bNow := c.layout.Bucket(now)
	var errs []error
	failed := 0
	_ = fanout.Each(len(read), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[read[i]]
		var err error
		op := "floors"
		switch {
		case pt.Ahead:
		case cells.Untouched(pt) && !pt.Lapped && c.plan.KeptFloors(pt):
			// No swap this lap, so its stored floors are a lap old or more: those kept
			// from its last lap here serve, and save a read.
			c.plan.StartFloors(pt, nil)
		default:
			err = c.loadFloors(ctx, pt)
		}
		if err == nil {
			op = "peek"
			if knowing != nil && pt.Bucket == bNow {
				err = c.peekAhead(ctx, pt, now, !knowing.Untouched(pt), knowing)
			} else {
				err = c.peek(ctx, pt, now, upper, !cells.Untouched(pt))
			}
		}
		if err != nil {
			pt.Err, pt.Avail, pt.Finished = err, 0, false
			c.observeFailure(ctx, pt.Key, op, err)
		}
		return nil
	})
	if idle {
		c.plan.NoteUpcoming(parts, current, full)
	} else {
		for _, i := range read {
			if parts[i].Err != nil {
				c.plan.Revisit(&parts[i])
			}
		}
	}
	avail := 0
	for _, i := range current {
		if parts[i].Err != nil {
			errs = append(errs, parts[i].Err)
			failed++
		}
		avail += parts[i].Avail
	}
	switch {
	case idle || avail >= want || scanplan.Backlogged(parts, current, now):
	case avail > 0:
		// Rows are coming due now: the caller, which takes them, is back soon, so the
		// look-ahead, which reads every partition again, is left to a call that finds none.
		for _, i := range current {
			if parts[i].Avail > 0 {
				parts[i].Next = now
			}
		}
	default:
		look = func() { c.lookAhead(ctx, parts, ahead, now) }
	}
	if failed > 0 && failed == len(current) {
		return look, errors.Join(errs...)
	}
	return look, nil
}

// lookAhead finds when the next row becomes visible in the current buckets' partitions
// and in the look-ahead buckets, for NextDue.
func (c *Consumer) lookAhead(ctx context.Context, parts []scanplan.Part, ahead []int, now time.Time) {
	var idx []int
	for i, pt := range parts {
		if pt.Err == nil && !pt.Ahead && c.layout.Bucket(now) == pt.Bucket {
			idx = append(idx, i)
		}
	}
	var aheadParts []scanplan.Part
	for _, i := range ahead {
		aheadParts = append(aheadParts, parts[i])
	}
	cells := c.sharedCells(ctx, aheadParts)
	for _, i := range ahead {
		if !cells.Untouched(&parts[i]) {
			idx = append(idx, i)
		}
	}
	upper := shard.MaxID(now.Add(c.cfg.LookAhead))
	_ = fanout.Each(len(idx), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[idx[i]]
		from := shard.MaxID(now)
		if pt.Ahead {
			from = shard.MinID(c.layout.BucketStart(pt.Bucket))
		}
		refs, err := c.leasing.IDs(ctx, pt.Key, scanplan.AllPriorities, from, upper, scanplan.PeekLimit)
		for _, r := range refs {
			if at := shard.IDTime(r.ID); at.After(now) && (pt.Next.IsZero() || at.Before(pt.Next)) {
				pt.Next = at
			}
		}
		if err != nil {
			c.observeFailure(ctx, pt.Key, "peek", wrapErr("looking ahead in", pt.Key, err))
		}
		return nil
	})
}
