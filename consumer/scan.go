package consumer

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// Read floors: why reads cost the same however much a partition has drained.
//
// Every row is written with an ID time no earlier than its writer's clock at the time of
// the write: a pending task's due time, clamped up to when it was scheduled; a marker's
// lease deadline; a retry's next due time. So once a consumer read a partition at time T
// and found the rows of a priority up to some point consumed or absent, no row can later
// appear in that priority below min(that point, T - MaxClockSkew) as long as clocks and
// write latency stay within MaxClockSkew. That bound is the priority's floor, and reads
// start above it with `id > floor`: Cassandra seeks past every tombstone beneath it.
//
// Floors are kept per partition and lap in memory, and written into the partition's lock
// row by every swap, in the same fenced transaction, so that another consumer (or this
// one after a restart) starts from them. A partition with no floor for the current lap
// is read from the start of the previous lap, so a row written late in the previous lap
// is still found.

// nPriorities is how many priorities there are; floors are indexed by priority.
const nPriorities = shardq.MaxPriority - shardq.MinPriority + 1

// floors holds, per priority, an exclusive lower bound on the IDs of the live rows of a
// partition's lap.
type floors [nPriorities]gocql.UUID

// lapFloors are a partition's floors in the lap of bucket.
type lapFloors struct {
	bucket int64
	f      floors
}

type pkey struct {
	key    string
	bucket int64
}

// peekLimit bounds the rows one peek reads.
const peekLimit = 100

// Locked reads start with pages of this many rows and shrink them once large payloads
// are seen, so a page stays near MaxTakeBytes.
const initialPageRows = MaxAcquire

const (
	selectFloors = `SELECT floor_bucket, floors FROM tasks WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	// floorAssignments records a swap's new floors in the lock row; see
	// locking.Lease.ReleaseStatementSetting.
	floorAssignments = `floor_bucket = ?, floors = floors + ?`
)

// span is what one read of a partition covered, to move its floors.
type span struct {
	readAt   time.Time         // the clock before the read was sent
	full     [nPriorities]bool // priorities read up to the upper bound
	cut      bool              // the read stopped inside priority cutPrio, at row cutID
	cutPrio  int8
	cutID    gocql.UUID
	first    [nPriorities]gocql.UUID // first row read per priority; zero if none
	consumed bool                    // every row read was deleted (a swap that applied)
}

// note records row (prio, id) as read, in clustering order.
func (s *span) note(prio int8, id gocql.UUID) {
	if s.first[prio] == (gocql.UUID{}) {
		s.first[prio] = id
	}
	s.cutPrio, s.cutID = prio, id
}

// cover records that group g was read: in full, or, when the read stopped at its limit,
// up to the last row noted (priorities of g above that row's were read in full).
func (s *span) cover(g group, stopped bool) {
	s.cut = stopped
	for _, p := range g.prios {
		if !stopped || p > s.cutPrio {
			s.full[p] = true
		}
	}
}

// raise moves f up by what s saw. A priority read in full rests at the earliest row left
// in it, or at readAt less the skew when it held none; the priority a read stopped in
// rests at its last row consumed, or its first row left.
func (f *floors) raise(s span, skew time.Duration) {
	settled := gocql.UUID(shard.MinID(s.readAt.Add(-skew)))
	below := func(id gocql.UUID) gocql.UUID {
		return gocql.UUID(shard.MinID(shard.IDTime(uuid.UUID(id)).Add(-100 * time.Nanosecond)))
	}
	for p := range nPriorities {
		var cand gocql.UUID
		switch {
		case s.full[p] && (s.consumed || s.first[p] == (gocql.UUID{})):
			cand = settled
		case s.full[p]:
			cand = minID(below(s.first[p]), settled)
		case s.cut && int(s.cutPrio) == p && s.consumed:
			cand = minID(s.cutID, settled)
		case s.cut && int(s.cutPrio) == p:
			cand = minID(below(s.first[p]), settled)
		default:
			continue
		}
		if shard.CompareIDs(uuid.UUID(cand), uuid.UUID(f[p])) > 0 {
			f[p] = cand
		}
	}
}

// above reports whether some priority's floor lies at or above time at: a row of that
// time written now would not be read.
func (f *floors) above(at time.Time) bool {
	id := gocql.UUID(shard.MinID(at))
	for _, fl := range f {
		if shard.CompareIDs(uuid.UUID(fl), uuid.UUID(id)) >= 0 {
			return true
		}
	}
	return false
}

func minID(a, b gocql.UUID) gocql.UUID {
	if shard.CompareIDs(uuid.UUID(a), uuid.UUID(b)) <= 0 {
		return a
	}
	return b
}

// group is a run of priorities, highest first, read by one query from one floor.
type group struct {
	prios []int8
	floor gocql.UUID
}

// plan splits the priorities into runs whose floors lie within MaxClockSkew of each
// other, each read from its lowest floor. Usually that is one run; a priority drained
// far behind the others (a backlog) gets its own, so the others' tombstones between its
// floor and theirs are not scanned.
func (c *Consumer) plan(f *floors) []group {
	var groups []group
	var lo, hi time.Time
	for p := shardq.MaxPriority; p >= shardq.MinPriority; p-- {
		t := shard.IDTime(uuid.UUID(f[p]))
		if n := len(groups); n > 0 && t.Sub(lo) <= c.cfg.MaxClockSkew && hi.Sub(t) <= c.cfg.MaxClockSkew {
			g := &groups[n-1]
			g.prios = append(g.prios, int8(p))
			g.floor = minID(g.floor, f[p])
			lo, hi = minTime(lo, t), maxTime(hi, t)
			continue
		}
		groups = append(groups, group{prios: []int8{int8(p)}, floor: f[p]})
		lo, hi = t, t
	}
	return groups
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// floorsOf returns a copy of the floors of pt's lap, or false when none are known.
func (c *Consumer) floorsOf(pt *part) (floors, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.floors[pkey{pt.key, pt.bucket}]
	if !ok {
		return floors{}, false
	}
	return *f, true
}

// raiseFloors folds a read of pt into its floors.
func (c *Consumer) raiseFloors(pt *part, s span) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.floors[pkey{pt.key, pt.bucket}]; ok {
		f.raise(s, c.cfg.MaxClockSkew)
	}
}

// loadFloors reads the floors the last swap of pt recorded, for a partition this
// consumer has none for, and starts from them (see startFloors).
func (c *Consumer) loadFloors(ctx context.Context, pt *part) error {
	if _, ok := c.floorsOf(pt); ok {
		return nil
	}
	var bucket int64
	var stored map[int8]gocql.UUID
	err := cql.Query(c.session, selectFloors, pt.key, taskrow.LockID).WithContext(ctx).Scan(&bucket, &stored)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return wrapErr("reading the floors of", pt.key, err)
	}
	c.startFloors(pt, stored)
	return nil
}

// startFloors sets pt's floors, unless it has some. Every floor ever recorded for the
// partition, in whatever lap, bounds rows consumed (none is left or written below it), so
// each priority starts at the highest of those stored and those this consumer kept from
// an earlier lap; with neither, at the beginning of time. Starting any later, at the
// previous lap say, would leave for good a row that waited in the partition through two
// laps without a consumer.
func (c *Consumer) startFloors(pt *part, stored map[int8]gocql.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.floors[pkey{pt.key, pt.bucket}]; ok {
		return
	}
	kept, haveKept := c.keptFloors[pt.key]
	var f floors
	for p := range f {
		f[p] = gocql.UUID(shard.MinID(shard.MinIDTime))
		if v, ok := stored[int8(p)]; ok {
			f[p] = v
		}
		if haveKept && kept.bucket < pt.bucket && shard.CompareIDs(uuid.UUID(kept.f[p]), uuid.UUID(f[p])) > 0 {
			f[p] = kept.f[p]
		}
	}
	c.floors[pkey{pt.key, pt.bucket}] = &f
}

// peek reads the IDs of pt's rows from its floors up to upper (now, or now plus the
// look-ahead): how many are visible now, when the next one becomes visible, and, for a
// bucket that ended more than MaxClockSkew ago, whether nothing of its lap is left.
// Look-ahead buckets are read from their own start and move no floor.
func (c *Consumer) peek(ctx context.Context, pt *part, now, upper time.Time, touched bool) error {
	if c.failRead != nil {
		if err := c.failRead(pt.key); err != nil {
			return err
		}
	}
	var groups []group
	f, ok := c.floorsOf(pt)
	if ok {
		groups = c.plan(&f)
	} else {
		groups = []group{{prios: allPriorities, floor: gocql.UUID(shard.MinID(c.layout.BucketStart(pt.bucket)))}}
	}
	s := span{readAt: now}
	read := 0
	for _, g := range groups {
		want := peekLimit - read
		iter := cql.Query(c.session, taskrow.SelectRangeIDs, pt.key, g.prios, g.floor, gocql.UUID(shard.MaxID(upper)), want).
			WithContext(ctx).Iter()
		var prio int8
		var id gocql.UUID
		got := 0
		for iter.Scan(&prio, &id) {
			got++
			s.note(prio, id)
			switch at := shard.IDTime(uuid.UUID(id)); {
			case !at.After(now):
				pt.avail++
			case pt.next.IsZero() || at.Before(pt.next):
				pt.next = at
			}
		}
		if err := iter.Close(); err != nil {
			return wrapErr("reading", pt.key, err)
		}
		read += got
		s.cover(g, got == want)
		if s.cut {
			break
		}
	}
	if s.cut && pt.avail == 0 {
		// The rows beyond the limit are unknown: they may be due, so look again soon.
		pt.next = now
	}
	if ok {
		c.raiseFloors(pt, s)
	}
	pt.finished = !s.cut && pt.avail == 0 && c.ended(pt, now)
	if pt.finished && ok && touched && c.lateUnchecked(pt) && c.lateRow(ctx, pt, now) {
		pt.finished, pt.avail = false, 1
	}
	return nil
}

// ended reports whether pt's bucket ended more than MaxClockSkew ago, so no row of its
// lap can still be written into it on time.
func (c *Consumer) ended(pt *part, now time.Time) bool {
	return !pt.ahead && !now.Before(c.layout.BucketStart(pt.bucket+1).Add(c.cfg.MaxClockSkew))
}

// hasFloors reports whether pt was read, or set up to be, in its current lap.
func (c *Consumer) hasFloors(pt *part) bool {
	_, ok := c.floorsOf(pt)
	return ok
}

// lateUnchecked reports whether lateRow should read finished partition pt: not yet in
// this lap, or its signal cell changed since, as the sweeps read it. A partition that a
// cursor cannot pass yet, behind an older one still busy, is found finished by every
// scan, and reading its bucket's tombstones each time cost more than the drain itself.
// Any write into it after the check is late and touches its cell, so a later sweep shows
// it; the value is the one read before the check, so a write in between is checked too.
func (c *Consumer) lateUnchecked(pt *part) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := pkey{pt.key, pt.bucket}
	cell := c.cells[c.cellOf(pt)]
	if v, ok := c.lateChecked[k]; ok && maps.Equal(v, cell) {
		return false
	}
	c.lateChecked[k] = cell
	return true
}

// lateRow reads a partition about to be passed from the start of its bucket (see
// lateUnchecked for how often): a row written later than MaxClockSkew into the bucket
// while it was being read lies below the floors, and its signal cell was touched again
// by on-time writes since, so no sweep can tell. A row found lowers the floors below it.
// The read walks the bucket's tombstones once; when it fails, the partition is passed
// all the same, and such a row waits for the ring to come back.
func (c *Consumer) lateRow(ctx context.Context, pt *part, now time.Time) bool {
	at, ok := c.firstVisible(ctx, pt, now)
	if !ok {
		return false
	}
	below := gocql.UUID(shard.MinID(at.Add(-100 * time.Nanosecond)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.floors[pkey{pt.key, pt.bucket}]; ok {
		for p := range f {
			f[p] = minID(f[p], below)
		}
	}
	c.log.WarnContext(ctx, "a row was written later than MaxClockSkew; reading it", "queue", c.q.Name,
		"shard_key", pt.key, "row_time", at)
	return true
}

// firstVisible reads the earliest row of pt's bucket visible at now, whatever the floors:
// it walks the bucket's tombstones once. A failed read is logged and finds nothing.
func (c *Consumer) firstVisible(ctx context.Context, pt *part, now time.Time) (time.Time, bool) {
	var prio int8
	var id gocql.UUID
	err := cql.Query(c.session, taskrow.SelectRangeIDs, pt.key, allPriorities,
		gocql.UUID(shard.MinID(c.layout.BucketStart(pt.bucket))), gocql.UUID(shard.MaxID(now)), 1).
		WithContext(ctx).Scan(&prio, &id)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return time.Time{}, false
	case err != nil:
		c.log.WarnContext(ctx, "reading a partition for late rows", "queue", c.q.Name, "shard_key", pt.key, "error", err)
		return time.Time{}, false
	}
	return shard.IDTime(uuid.UUID(id)), true
}

var allPriorities = func() []int8 {
	var p []int8
	for i := shardq.MaxPriority; i >= shardq.MinPriority; i-- {
		p = append(p, int8(i))
	}
	return p
}()

// peekAll peeks at the partitions of buckets up to now. A consumer whose last call came
// up short reads up to LookAhead past now at once, and the look-ahead buckets with them;
// one that was busy reads due rows only, and looks ahead only if those fall short of
// want: rows coming due later matter for NextDue, which matters only to a consumer that
// is about to go idle. That look-ahead is returned to run, not run: it only sets the
// parts' next, so it can run beside the takes. A partition that fails is skipped; the
// error returned is the joined failures when every partition failed.
func (c *Consumer) peekAll(ctx context.Context, parts []part, want int, now time.Time, idle bool) (look func(), err error) {
	var current, ahead []int
	for i, pt := range parts {
		if pt.ahead {
			ahead = append(ahead, i)
		} else {
			current = append(current, i)
		}
	}
	upper := now
	var cells map[signal.Cell]gocql.UUID
	full := true
	if idle {
		// Every task and marker write touches its signal cell. A look-ahead partition
		// whose cell was not touched holds nothing of its lap; a current one cannot have
		// floors recorded for this lap, which saves reading them. Between full scans
		// (one per half LookAhead), only partitions with a row the last full scan saw
		// coming due, or whose cell changed since, are read: rows written since were
		// touched, and earlier ones due before the next full scan were seen.
		upper = now.Add(c.cfg.LookAhead)
		cells = c.touchedCells(ctx, parts)
		full = c.fullScan(now, cells)
		var read []int
		for _, i := range append(current, ahead...) {
			pt := &parts[i]
			switch {
			case c.comingDue(pt, now):
				read = append(read, i)
			case c.untouched(cells, pt) && (pt.ahead || c.hasFloors(pt)):
				// Nothing was written into it this lap, and rows left from the last lap
				// were looked for when it was first read: there is nothing to read.
				pt.finished = c.ended(pt, now)
			case full || c.changedSinceScan(cells, pt):
				read = append(read, i)
			default:
				pt.next = c.upcomingOf(pt)
			}
		}
		current, ahead = read, nil
	}
	var errs []error
	failed := 0
	_ = fanout.Each(len(current), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[current[i]]
		var err error
		op := "floors"
		switch {
		case pt.ahead:
		case c.untouched(cells, pt):
			c.startFloors(pt, nil)
		default:
			err = c.loadFloors(ctx, pt)
		}
		if err == nil {
			op = "peek"
			err = c.peek(ctx, pt, now, upper, !c.untouched(cells, pt))
		}
		if err != nil {
			pt.err, pt.avail, pt.finished = err, 0, false
			c.observeFailure(ctx, pt.key, op, err)
		}
		return nil
	})
	if idle {
		c.noteUpcoming(parts, current, full)
	}
	avail := 0
	for _, i := range current {
		if parts[i].err != nil {
			errs = append(errs, parts[i].err)
			failed++
		}
		avail += parts[i].avail
	}
	if !idle && avail < want && !backlogged(parts, current, now) {
		look = func() { c.lookAhead(ctx, parts, ahead, now) }
	}
	if failed > 0 && failed == len(current) {
		return look, errors.Join(errs...)
	}
	return look, nil
}

// backlogged reports whether a peek of the partitions current saw as many rows visible as
// it reads (peekLimit), so perhaps more, and marks those due now. Their takes go back in line for more, so
// the call fills up and NextDue does not matter; looking ahead would only read the
// tombstones of the leases acked since, in the current buckets, once per call of a drain.
func backlogged(parts []part, current []int, now time.Time) bool {
	more := false
	for _, i := range current {
		if parts[i].avail >= peekLimit {
			parts[i].next, more = now, true
		}
	}
	return more
}

// lookAhead finds when the next row becomes visible in the current buckets' partitions
// and in the look-ahead buckets, for NextDue.
func (c *Consumer) lookAhead(ctx context.Context, parts []part, ahead []int, now time.Time) {
	var idx []int
	for i, pt := range parts {
		if pt.err == nil && !pt.ahead && c.layout.Bucket(now) == pt.bucket {
			idx = append(idx, i)
		}
	}
	var aheadParts []part
	for _, i := range ahead {
		aheadParts = append(aheadParts, parts[i])
	}
	cells := c.touchedCells(ctx, aheadParts)
	for _, i := range ahead {
		if !c.untouched(cells, &parts[i]) {
			idx = append(idx, i)
		}
	}
	upper := gocql.UUID(shard.MaxID(now.Add(c.cfg.LookAhead)))
	_ = fanout.Each(len(idx), c.cfg.PartitionsInFlight, func(i int) error {
		pt := &parts[idx[i]]
		from := gocql.UUID(shard.MaxID(now))
		if pt.ahead {
			from = gocql.UUID(shard.MinID(c.layout.BucketStart(pt.bucket)))
		}
		var prio int8
		var id gocql.UUID
		iter := cql.Query(c.session, taskrow.SelectRangeIDs, pt.key, allPriorities, from, upper, peekLimit).WithContext(ctx).Iter()
		for iter.Scan(&prio, &id) {
			if at := shard.IDTime(uuid.UUID(id)); at.After(now) && (pt.next.IsZero() || at.Before(pt.next)) {
				pt.next = at
			}
		}
		if err := iter.Close(); err != nil {
			c.observeFailure(ctx, pt.key, "peek", wrapErr("looking ahead in", pt.key, err))
		}
		return nil
	})
}

// fullScan decides whether an idle scan reads every candidate partition, and records
// the signal cells it starts from when it does.
func (c *Consumer) fullScan(now time.Time, cells map[signal.Cell]gocql.UUID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cells != nil && !c.fullAt.IsZero() && now.Before(c.fullAt.Add(c.cfg.LookAhead/2)) {
		return false
	}
	c.fullAt, c.fullCells = now, cells
	return true
}

// changedSinceScan reports whether pt's signal cell was touched since the last full scan.
func (c *Consumer) changedSinceScan(cells map[signal.Cell]gocql.UUID, pt *part) bool {
	cell := c.cellOf(pt)
	v, ok := cells[cell]
	c.mu.Lock()
	defer c.mu.Unlock()
	return ok && c.fullCells[cell] != v
}

// comingDue reports whether a scan saw a row of pt becoming visible by now.
func (c *Consumer) comingDue(pt *part, now time.Time) bool {
	next := c.upcomingOf(pt)
	return !next.IsZero() && !next.After(now)
}

func (c *Consumer) upcomingOf(pt *part) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.upcoming[pkey{pt.key, pt.bucket}]
}

// revisit marks a partition to be read by the next scan, full or not: one that failed,
// or whose due rows were skipped.
var revisit = time.Unix(0, 1)

// noteUpcoming records when the next row of each partition read becomes visible; a full
// scan starts the record afresh.
func (c *Consumer) noteUpcoming(parts []part, read []int, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if full {
		clear(c.upcoming)
	}
	for _, i := range read {
		pt := &parts[i]
		k := pkey{pt.key, pt.bucket}
		switch {
		case pt.err != nil:
			c.upcoming[k] = revisit
		case pt.next.IsZero():
			delete(c.upcoming, k)
		default:
			c.upcoming[k] = pt.next
		}
	}
}
