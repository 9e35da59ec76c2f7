// Package scanplan holds a consumer's read plan: which partitions of its queue to read and
// from where. It owns the per-shard cursors, the read floors of each partition and lap,
// the partitions whose last take was full (hot), what the signal cells showed, and what
// the sweep sends the scan back to read. It does no I/O: the consumer reads and writes
// around it and tells it what came back.
package scanplan

import (
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// PeekLimit bounds the rows one peek reads; a hot partition is assumed to hold this many.
const PeekLimit = 100

// SweepInterval is how often a sweep looks for rows written later than the skew allows.
const SweepInterval = 10 * time.Second

// Config is what a plan is made for.
type Config struct {
	Layout shard.Layout
	// Skew is the consumer's MaxClockSkew.
	Skew time.Duration
	// LookAhead is the consumer's LookAhead.
	LookAhead time.Duration
	// MaxTakeBytes bounds the payload bytes one locked read takes.
	MaxTakeBytes int
	// MaxPageRows is the most rows a page of a locked read asks for, before large
	// payloads shrink its pages (SawPayload).
	MaxPageRows int
	// SlotStart is when a slot of a bucket's signal cell starts (signal.SlotStart).
	SlotStart func(bucket int64, slot int) time.Time
}

// Cell is a signal cell of the queue: a bucket and concurrency shard.
type Cell struct {
	Bucket int64
	Shard  int
}

// Cells are the signal cells as read: per cell, the earliest row time of its last touch.
// A nil map means they could not be read.
type Cells map[Cell]uuid.UUID

// Part is one partition a scan considers, and what reading it found.
type Part struct {
	Key      string
	Shard    int
	Bucket   int64
	Ahead    bool      // a bucket that starts after now: read only for NextDue
	Avail    int       // rows visible now, as far as seen (PeekLimit: maybe more)
	Next     time.Time // earliest row seen that is not yet visible; zero if none
	Oldest   time.Time // earliest row seen visible now; zero if none
	Finished bool      // a past bucket with nothing of its lap left: the cursor may pass it
	Err      error     // reading it failed
	Blind    bool      // taken without a peek (Plan.Known): busy, assumed to hold PeekLimit
	// Lapped: a bucket up to now whose partition held an earlier bucket the shard's cursor
	// had not passed when the ring came round to it (the consumer paused, or away longer
	// than a lap), so rows of that lap may wait in it whatever its cell shows of this lap.
	Lapped bool
}

// See counts a row read from pt with this ID: visible at now, or coming due.
func (pt *Part) See(id uuid.UUID, now time.Time) {
	switch at := shard.IDTime(id); {
	case !at.After(now):
		pt.Avail++
		if pt.Oldest.IsZero() || at.Before(pt.Oldest) {
			pt.Oldest = at
		}
	case pt.Next.IsZero() || at.Before(pt.Next):
		pt.Next = at
	}
}

func (pt *Part) cell() Cell            { return Cell{pt.Bucket, pt.Shard} }
func (pt *Part) pkey() pkey            { return pkey{pt.Key, pt.Bucket} }
func (c Cell) key(l shard.Layout) pkey { return pkey{l.Key(c.Bucket, c.Shard), c.Bucket} }

// pkey names a partition in one lap.
type pkey struct {
	key    string
	bucket int64
}

// revisit marks a partition to be read by the next scan, full or not: one that failed,
// or whose due rows were skipped.
var revisit = time.Unix(0, 1)

// skipRetry is how soon a consumer looks again at partitions it saw due rows in but
// could not take from.
const skipRetry = 100 * time.Millisecond

// Plan is a consumer's read plan. It is safe for concurrent use.
type Plan struct {
	cfg Config

	mu           sync.Mutex
	cursors      []int64         // per concurrency shard: the oldest bucket that may hold work
	hot          map[string]bool // partitions whose last take was full: tried before any peek
	floors       map[pkey]*floors
	keptFloors   map[string]lapFloors // per partition, the floors of the latest lap forgotten
	next         int                  // the concurrency shard the next scan starts at
	nextDue      time.Time            // earliest upcoming row the last scan saw; zero if none
	idle         bool                 // the last call found no task
	pageRows     int                  // rows per page of a locked read, from the largest payload seen
	fullAt       time.Time            // when an idle scan last read every candidate
	fullCells    Cells                // the signal cells as that scan found them
	upcoming     map[pkey]time.Time   // per partition, the next row seen coming due
	lateChecked  map[pkey]Slots       // finished partitions checked for late rows, with their cell as swept before
	swept        time.Time            // when the signal cells were last read for late rows
	cells        map[Cell]Slots       // the lap's signal cells as last read; nil before
	sweptCursors []int64              // the cursors when the cells were last read
	known        map[pkey]*known      // per partition of the current bucket, its rows coming due as last peeked
	dense        map[pkey]bool        // partitions too busy for a peek that reads ahead
	quiet        map[pkey]bool        // current partitions found without a row of their lap or the lap before (quietLap)
	everRead     map[string]bool      // partitions read from their floors since the plan began, in any lap
	starts       []int64              // per concurrency shard, the bucket its cursor began at or last lapped to
	passed       []int64              // per concurrency shard, its pass mark (see StartPassed); noMark if none
	marked       []int64              // the pass mark last stored, per shard
	markedAt     time.Time            // when it was stored; zero before
}

// New returns the plan of a consumer starting at now, whose scans start at concurrency
// shard first (consumers spread over shards by starting at random ones). A new consumer
// looks back one whole lap, as an idle one: what it skips, its pass marks decide
// (StartPassed).
func New(cfg Config, now time.Time, first int) *Plan {
	n := cfg.Layout.ShardCount
	p := &Plan{cfg: cfg, cursors: make([]int64, n), next: first % n,
		hot: map[string]bool{}, floors: map[pkey]*floors{}, keptFloors: map[string]lapFloors{},
		upcoming: map[pkey]time.Time{}, lateChecked: map[pkey]Slots{}, pageRows: cfg.MaxPageRows,
		known: map[pkey]*known{}, dense: map[pkey]bool{}, quiet: map[pkey]bool{}, everRead: map[string]bool{},
		starts: make([]int64, n), passed: make([]int64, n), marked: make([]int64, n), idle: true}
	start := p.lapStart(now)
	for i := range n {
		p.cursors[i], p.starts[i], p.passed[i], p.marked[i] = start, start, noMark, noMark
	}
	return p
}

// lapStart is the first bucket of the lap that ends with now's.
func (p *Plan) lapStart(now time.Time) int64 {
	return p.cfg.Layout.Bucket(now) - int64(p.cfg.Layout.BucketCount) + 1
}

// Begin starts a call: it forgets the last call's NextDue and reports whether that call
// found no task (the consumer is idle).
func (p *Plan) Begin() (idle bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextDue = time.Time{}
	return p.idle
}

// End records whether the call found no task.
func (p *Plan) End(idle bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = idle
}

// NextDue is the earliest time the last call saw a row become visible; see
// consumer.Consumer.NextDue.
func (p *Plan) NextDue() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextDue
}

// Candidates lists the partitions to look at, shard by shard from a rotating start so
// that consumers spread over shards, oldest bucket first within a shard, up to the
// bucket LookAhead from now. A hot partition is assumed to hold PeekLimit rows.
func (p *Plan) Candidates(now time.Time) []Part {
	l := p.cfg.Layout
	bNow := l.Bucket(now)
	bLast := l.Bucket(now.Add(p.cfg.LookAhead))
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.next
	p.next = (p.next + 1) % l.ShardCount
	var parts []Part
	for i := range l.ShardCount {
		s := (first + i) % l.ShardCount
		for b := max(p.cursors[s], p.lapStart(now)); b <= bLast; b++ {
			key := l.Key(b, s)
			pt := Part{Key: key, Shard: s, Bucket: b, Ahead: b > bNow, Lapped: b <= bNow && b-int64(l.BucketCount) >= p.cursors[s]}
			if p.hot[key] && !pt.Ahead {
				pt.Avail = PeekLimit
			}
			parts = append(parts, pt)
		}
	}
	return parts
}

// Advance moves each shard's cursor past its leading run of finished buckets, forgets
// the floors of partitions behind the cursors (keeping the latest lap's per partition),
// and records the earliest upcoming row for NextDue.
func (p *Plan) Advance(parts []Part, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdPassed(parts, now)
	blocked, seen := map[int]bool{}, map[int]bool{}
	lapStart := p.lapStart(now)
	for _, pt := range parts {
		if !pt.Next.IsZero() && (p.nextDue.IsZero() || pt.Next.Before(p.nextDue)) {
			p.nextDue = pt.Next
		}
		if !seen[pt.Shard] {
			// A call beside this one moved the cursor back (a sweep's Late) since
			// Candidates: the run from this call's first part does not follow on from it.
			seen[pt.Shard] = true
			blocked[pt.Shard] = pt.Bucket > max(p.cursors[pt.Shard], lapStart)
		}
		if blocked[pt.Shard] || !pt.Finished {
			blocked[pt.Shard] = true
			continue
		}
		if p.cursors[pt.Shard] <= pt.Bucket {
			p.cursors[pt.Shard] = pt.Bucket + 1
		}
	}
	p.raisePassed()
	for k, f := range p.floors {
		if _, _, s, err := shard.ParseKey(k.key); err != nil || k.bucket < max(p.cursors[s], lapStart) {
			if kept, ok := p.keptFloors[k.key]; !ok || kept.bucket < k.bucket {
				p.keptFloors[k.key] = lapFloors{k.bucket, *f}
			}
			delete(p.floors, k)
			delete(p.hot, k.key)
			delete(p.upcoming, k)
			delete(p.lateChecked, k)
		}
	}
	// Rows coming due are recorded for partitions of the current bucket only.
	bNow := p.cfg.Layout.Bucket(now)
	maps.DeleteFunc(p.known, func(k pkey, _ *known) bool { return k.bucket < bNow })
	maps.DeleteFunc(p.dense, func(k pkey, _ bool) bool { return k.bucket < bNow })
	maps.DeleteFunc(p.quiet, func(k pkey, _ bool) bool { return k.bucket < lapStart })
}

// Cursors returns a copy of the per-shard cursors: the oldest bucket each may hold work in.
func (p *Plan) Cursors() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.cursors...)
}

// Taken records whether a take from pt filled what it read for, so pt is tried first
// next time.
func (p *Plan) Taken(pt *Part, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if full {
		p.hot[pt.Key] = true
	} else {
		delete(p.hot, pt.Key)
	}
}

// Skipped records that pt was seen to hold due rows that could not be taken (its lock
// was held, its swap did not apply, or it failed): NextDue comes forward to shortly after
// now, and the next scan reads pt again.
func (p *Plan) Skipped(pt *Part, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upcoming[pt.pkey()] = revisit
	delete(p.known, pt.pkey())
	if at := now.Add(skipRetry); p.nextDue.IsZero() || at.Before(p.nextDue) {
		p.nextDue = at
	}
}

// Revisit marks pt, whose read failed, to be read by the next scan, busy or idle.
func (p *Plan) Revisit(pt *Part) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upcoming[pt.pkey()] = revisit
}

// PageRows is how many rows a page of a locked read should ask for.
func (p *Plan) PageRows() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pageRows
}

// SawPayload shrinks locked reads' pages once large payloads appear, so one page stays
// near MaxTakeBytes.
func (p *Plan) SawPayload(n int) {
	if n == 0 {
		return
	}
	rows := max(1, min(p.cfg.MaxPageRows, p.cfg.MaxTakeBytes/n))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pageRows = min(p.pageRows, rows)
}

// Ended reports whether pt's bucket ended more than the skew ago, so no row of its lap
// can still be written into it on time.
func (p *Plan) Ended(pt *Part, now time.Time) bool {
	return !pt.Ahead && !now.Before(p.cfg.Layout.BucketStart(pt.Bucket+1).Add(p.cfg.Skew))
}

// HasFloors reports whether pt was read, or set up to be, in its current lap.
func (p *Plan) HasFloors(pt *Part) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.floors[pt.pkey()]
	return ok
}

// StartFloors sets pt's floors from stored, the floors its last swap recorded (nil when
// none), unless it has some. Every floor ever recorded for the partition, in whatever
// lap, bounds rows consumed (none is left or written below it), so each priority starts
// at the highest of those stored and those this plan kept from an earlier lap; with
// neither, at the beginning of time. Starting any later, at the previous lap say, would
// leave for good a row that waited in the partition through two laps without a consumer.
func (p *Plan) StartFloors(pt *Part, stored map[int8]uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.floors[pt.pkey()]; ok {
		return
	}
	kept, haveKept := p.keptFloors[pt.Key]
	var f floors
	for i := range f {
		f[i] = shard.MinID(shard.MinIDTime)
		if v, ok := stored[int8(i)]; ok {
			f[i] = v
		}
		if haveKept && kept.bucket < pt.Bucket && shard.CompareIDs(kept.f[i], f[i]) > 0 {
			f[i] = kept.f[i]
		}
	}
	p.floors[pt.pkey()] = &f
}

// KeptFloors reports whether the plan kept floors of pt's partition from an earlier lap
// (StartFloors starts from them).
func (p *Plan) KeptFloors(pt *Part) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept, ok := p.keptFloors[pt.Key]
	return ok && kept.bucket < pt.Bucket
}

// PeekGroups returns the reads a peek of pt makes: from its floors, or from its bucket's
// start when it has none (known false), as for a look-ahead bucket.
func (p *Plan) PeekGroups(pt *Part) (groups []Group, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.floors[pt.pkey()]; ok {
		return f.groups(p.cfg.Skew), true
	}
	return []Group{{Prios: AllPriorities, Floor: shard.MinID(p.cfg.Layout.BucketStart(pt.Bucket))}}, false
}

// TakeGroups returns the reads a locked read of pt makes, from its floors.
func (p *Plan) TakeGroups(pt *Part) []Group {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f floors
	if cur, ok := p.floors[pt.pkey()]; ok {
		f = *cur
	}
	return f.groups(p.cfg.Skew)
}

// Read folds a read of pt that deleted nothing into its floors.
func (p *Plan) Read(pt *Part, s Span) { p.raise(pt, s) }

func (p *Plan) raise(pt *Part, s Span) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.everRead[pt.Key] = true
	if f, ok := p.floors[pt.pkey()]; ok {
		f.raise(s, p.cfg.Skew)
	}
}

// Peeked finishes a peek of pt that read s, with known as PeekGroups returned it, and
// touched when pt's signal cell shows a write this lap. It reports whether pt, found
// finished, must first be read from its bucket's start for a late row (LateRow).
func (p *Plan) Peeked(pt *Part, s Span, known, touched bool, now time.Time) (checkLate bool) {
	if s.cut && pt.Avail == 0 {
		// The rows beyond the limit are unknown: they may be due, so look again soon.
		pt.Next = now
	}
	if known {
		p.Read(pt, s)
	}
	pt.Finished = !s.cut && pt.Avail == 0 && p.Ended(pt, now)
	return pt.Finished && known && touched && p.lateUnchecked(pt)
}

// lateUnchecked reports whether finished partition pt should be read for a late row: not
// yet in this lap, or its signal cell changed since, as the sweeps read it. A partition
// that a cursor cannot pass yet, behind an older one still busy, is found finished by
// every scan, and reading its bucket's tombstones each time cost more than the drain
// itself. Any write into it after the check is late and touches its cell, so a later
// sweep shows it; the value is the one read before the check, so a write in between is
// checked too.
func (p *Plan) lateUnchecked(pt *Part) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := pt.pkey()
	cell := p.cells[pt.cell()]
	if v, ok := p.lateChecked[k]; ok && maps.Equal(v, cell) {
		return false
	}
	p.lateChecked[k] = cell
	return true
}

// LateRow records that a row visible at at was found in pt below its floors (written
// later than the skew allows): the floors go below it, and pt is not finished.
func (p *Plan) LateRow(pt *Part, at time.Time) {
	below := justBelow(at)
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.floors[pt.pkey()]; ok {
		for i := range f {
			f[i] = minID(f[i], below)
		}
	}
	delete(p.known, pt.pkey())
	pt.Finished, pt.Avail = false, 1
	if pt.Oldest.IsZero() || at.Before(pt.Oldest) {
		pt.Oldest = at
	}
}

// SwapFloors returns the floors a swap of the rows s read from pt records: pt's floors
// raised as if the swap applied.
func (p *Plan) SwapFloors(pt *Part, s Span) map[int8]uuid.UUID {
	p.mu.Lock()
	var f floors
	if cur, ok := p.floors[pt.pkey()]; ok {
		f = *cur
	}
	p.mu.Unlock()
	s.consumed = true
	f.raise(s, p.cfg.Skew)
	stored := make(map[int8]uuid.UUID, NPriorities)
	for i, id := range f {
		stored[int8(i)] = id
	}
	return stored
}

// Swapped records that a swap deleted every row s read from pt.
func (p *Plan) Swapped(pt *Part, s Span) {
	s.consumed = true
	p.raise(pt, s)
}
