package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer/internal/scanplan"
	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// The scan reads what its plan (package scanplan) says, from the read floors the plan
// keeps per partition and lap; see there for why reads cost the same however much a
// partition has drained. Floors are also written into the partition's lock row by every
// swap, in the same fenced transaction, so that another consumer (or this one after a
// restart) starts from them.

const (
	selectFloors = `SELECT floor_bucket, floors FROM tasks WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	// floorAssignments records a swap's new floors in the lock row; see
	// locking.Lease.ReleaseStatementSetting.
	floorAssignments = `floor_bucket = ?, floors = floors + ?`
)

// loadFloors reads the floors the last swap of pt recorded, for a partition this
// consumer has none for, and starts from them (scanplan.Plan.StartFloors).
func (c *Consumer) loadFloors(ctx context.Context, pt *scanplan.Part) error {
	if c.plan.HasFloors(pt) {
		return nil
	}
	var bucket int64
	var stored map[int8]gocql.UUID
	err := cql.Query(c.session, selectFloors, pt.Key, taskrow.LockID).WithContext(ctx).Scan(&bucket, &stored)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return wrapErr("reading the floors of", pt.Key, err)
	}
	var floors map[int8]uuid.UUID
	if stored != nil {
		floors = make(map[int8]uuid.UUID, len(stored))
		for p, id := range stored {
			floors[p] = uuid.UUID(id)
		}
	}
	c.plan.StartFloors(pt, floors)
	return nil
}

// peek reads the IDs of pt's rows from its floors up to upper (now, or now plus the
// look-ahead): how many are visible now, when the next one becomes visible, and, for a
// bucket that ended more than MaxClockSkew ago, whether nothing of its lap is left.
// Look-ahead buckets are read from their own start and move no floor.
func (c *Consumer) peek(ctx context.Context, pt *scanplan.Part, now, upper time.Time, touched bool) error {
	if c.failRead != nil {
		if err := c.failRead(pt.Key); err != nil {
			return err
		}
	}
	groups, known := c.plan.PeekGroups(pt)
	s := scanplan.NewSpan(now)
	read := 0
	for _, g := range groups {
		want := scanplan.PeekLimit - read
		iter := cql.Query(c.session, taskrow.SelectRangeIDs, pt.Key, g.Prios, gocql.UUID(g.Floor), gocql.UUID(shard.MaxID(upper)), want).
			WithContext(ctx).Iter()
		var prio int8
		var id gocql.UUID
		got := 0
		for iter.Scan(&prio, &id) {
			got++
			s.Note(prio, uuid.UUID(id))
			pt.See(uuid.UUID(id), now)
		}
		if err := iter.Close(); err != nil {
			return wrapErr("reading", pt.Key, err)
		}
		read += got
		s.Cover(g, got == want)
		if s.Cut() {
			break
		}
	}
	if c.plan.Peeked(pt, s, known, touched, now) {
		c.lateRow(ctx, pt, now)
	}
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
	at, ok := c.firstVisible(ctx, pt, now)
	if !ok {
		return
	}
	c.plan.LateRow(pt, at)
	c.log.WarnContext(ctx, "a row was written later than MaxClockSkew; reading it", "queue", c.q.Name,
		"shard_key", pt.Key, "row_time", at)
}

// firstVisible reads the earliest row of pt's bucket visible at now, whatever the floors:
// it walks the bucket's tombstones once. A failed read is logged and finds nothing.
func (c *Consumer) firstVisible(ctx context.Context, pt *scanplan.Part, now time.Time) (time.Time, bool) {
	var prio int8
	var id gocql.UUID
	err := cql.Query(c.session, taskrow.SelectRangeIDs, pt.Key, scanplan.AllPriorities,
		gocql.UUID(shard.MinID(c.layout.BucketStart(pt.Bucket))), gocql.UUID(shard.MaxID(now)), 1).
		WithContext(ctx).Scan(&prio, &id)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return time.Time{}, false
	case err != nil:
		c.log.WarnContext(ctx, "reading a partition for late rows", "queue", c.q.Name, "shard_key", pt.Key, "error", err)
		return time.Time{}, false
	}
	return shard.IDTime(uuid.UUID(id)), true
}

// peekAll peeks at the partitions of buckets up to now. A consumer whose last call came
// up short reads up to LookAhead past now at once, and the look-ahead buckets with them,
// those the plan chooses from the signal cells (scanplan.Plan.IdleReads); one that was
// busy reads due rows only, and looks ahead only if those fall short of want: rows coming
// due later matter for NextDue, which matters only to a consumer that is about to go
// idle. That look-ahead is returned to run, not run: it only sets the parts' Next, so it
// can run beside the takes. A partition that fails is skipped; the error returned is the
// joined failures when every partition failed.
func (c *Consumer) peekAll(ctx context.Context, parts []scanplan.Part, want int, now time.Time, idle bool) (look func(), err error) {
	current, ahead := scanplan.Split(parts)
	upper := now
	var cells scanplan.Cells
	full := true
	if idle {
		upper = now.Add(c.cfg.LookAhead)
		cells = c.touchedCells(ctx, parts)
		current, full = c.plan.IdleReads(parts, now, cells)
		ahead = nil
	}
	var errs []error
	failed := 0
	_ = fanout.Each(len(current), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[current[i]]
		var err error
		op := "floors"
		switch {
		case pt.Ahead:
		case cells.Untouched(pt):
			c.plan.StartFloors(pt, nil)
		default:
			err = c.loadFloors(ctx, pt)
		}
		if err == nil {
			op = "peek"
			err = c.peek(ctx, pt, now, upper, !cells.Untouched(pt))
		}
		if err != nil {
			pt.Err, pt.Avail, pt.Finished = err, 0, false
			c.observeFailure(ctx, pt.Key, op, err)
		}
		return nil
	})
	if idle {
		c.plan.NoteUpcoming(parts, current, full)
	}
	avail := 0
	for _, i := range current {
		if parts[i].Err != nil {
			errs = append(errs, parts[i].Err)
			failed++
		}
		avail += parts[i].Avail
	}
	if !idle && avail < want && !scanplan.Backlogged(parts, current, now) {
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
	cells := c.touchedCells(ctx, aheadParts)
	for _, i := range ahead {
		if !cells.Untouched(&parts[i]) {
			idx = append(idx, i)
		}
	}
	upper := gocql.UUID(shard.MaxID(now.Add(c.cfg.LookAhead)))
	_ = fanout.Each(len(idx), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[idx[i]]
		from := gocql.UUID(shard.MaxID(now))
		if pt.Ahead {
			from = gocql.UUID(shard.MinID(c.layout.BucketStart(pt.Bucket)))
		}
		var prio int8
		var id gocql.UUID
		iter := cql.Query(c.session, taskrow.SelectRangeIDs, pt.Key, scanplan.AllPriorities, from, upper, scanplan.PeekLimit).WithContext(ctx).Iter()
		for iter.Scan(&prio, &id) {
			if at := shard.IDTime(uuid.UUID(id)); at.After(now) && (pt.Next.IsZero() || at.Before(pt.Next)) {
				pt.Next = at
			}
		}
		if err := iter.Close(); err != nil {
			c.observeFailure(ctx, pt.Key, "peek", wrapErr("looking ahead in", pt.Key, err))
		}
		return nil
	})
}
