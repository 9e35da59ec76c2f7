// Package signal tells idle workers in other processes that tasks were written. Producers
// and consumers touch one cell per (queue, bucket, concurrency shard) they wrote a task
// row or a timeout marker into, after the write; an idle worker reads the few rows of the
// buckets coming due a few times a second, which costs one small read, and fetches when a
// cell changed. Consumers also read the cells of buckets ahead of now to peek only the
// partitions that something was written into, and sweep the lap's cells for rows written
// below their read floors. Every writer also touches a cell before its first row into it
// (Announcer), so a cell no touch reached proves its partition holds no row of its bucket.
//
// A cell's row holds two maps, each entry the earliest row time of its last touch: one
// entry per shard, which wake-ups and idle scans read, and one per slot (SlotWidth of its
// bucket) that rows were written into, which only sweeps read. Touches are stamped by the
// coordinator, so an entry keeps the touch made last in real time, whatever the writers'
// clocks, and a slot's write time tells when that was: a slot touched long after it began
// was written late, by a writer whose clock trails or whose write was delayed, and no
// touch after it can hide that.
package signal

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// Cell is one signal cell: a queue's bucket and concurrency shard, whose partition rows
// were written into.
type Cell struct {
	Queue  string
	Bucket int64
	Shard  int
}

// Entry is one slot of a cell.
type Entry struct {
	Cell
	Slot int
}

// Slots are a cell's entries as read: per slot, the earliest row time of its last touch.
type Slots map[int]uuid.UUID

// SlotWidth is the span of a bucket one entry stands for. A sweep takes a slot whose last
// touch came more than half the consumer's MaxClockSkew after the slot began for a late
// write (LastTouches): on-time writers touch a slot until shortly after it ends, so the
// slot must be well under half the default MaxClockSkew for their touches to pass as on
// time.
const SlotWidth = 500 * time.Millisecond

// maxSlots bounds the entries of a cell, which sweeps read for every bucket of the lap:
// buckets longer than maxSlots slots get wider slots, whose on-time touches may pass for
// late and cost a sweep a needless read. The slot and the shard (at most
// shardqtype.MaxShardCount) share one int map key.
const maxSlots = 64

// slotWidth is the width of l's slots.
func slotWidth(l shard.Layout) time.Duration {
	return max(SlotWidth, (l.BucketDuration+maxSlots-1)/maxSlots)
}

// SlotStart is when slot of bucket starts, in the queue laid out by l.
func SlotStart(l shard.Layout, bucket int64, slot int) time.Time {
	return l.BucketStart(bucket).Add(time.Duration(slot) * slotWidth(l))
}

func mapKey(e Entry) int { return e.Slot<<16 | e.Shard }

// EntryAt is the entry of the cell of queue's bucket whose slot map has key k (Row.Slots).
func EntryAt(queue string, bucket int64, k int) Entry {
	return Entry{Cell: Cell{Queue: queue, Bucket: bucket, Shard: k & 0xffff}, Slot: k >> 16}
}

// Touches gathers the entries rows were written into, each with the earliest row time
// written into it, for one Touch.
type Touches struct {
	idx  map[Entry]int
	list []Touch
}

// Add records a row of the ring laid out by l (each generation of a queue signals apart): its ID (whose time is when it becomes
// visible) and its task's ID (which picks its concurrency shard).
func (ts *Touches) Add(l shard.Layout, id, taskID uuid.UUID) {
	at := shard.IDTime(id)
	b := l.Bucket(at)
	e := Entry{Cell: Cell{Queue: l.Ring(), Bucket: b, Shard: l.ShardFor(taskID)},
		Slot: int(at.Sub(l.BucketStart(b)) / slotWidth(l))}
	if i, ok := ts.idx[e]; ok {
		if at.Before(ts.list[i].Earliest) {
			ts.list[i].Earliest = at
		}
		return
	}
	if ts.idx == nil {
		ts.idx = map[Entry]int{}
	}
	ts.idx[e] = len(ts.list)
	ts.list = append(ts.list, Touch{Entry: e, Earliest: at, Until: l.BucketStart(b + 1),
		Needed: l.BucketStart(b + int64(l.BucketCount))})
}

// List returns the entries gathered, to write them without a Toucher (Writer.Touch).
func (ts *Touches) List() []Touch { return ts.list }

// Touch is an entry to touch: Earliest is the earliest visible time among the rows just
// written into it, which the entry records (as a timeuuid that also makes every touch
// unique), and Until the end of its bucket, which the cell outlives by a day. Needed is
// when the touch stops mattering: the ring comes back to its partition, whose first read
// in that lap starts from the lap before and finds the rows untouched. A Toucher retries
// a failed touch until then (zero: never).
type Touch struct {
	Entry
	Earliest time.Time
	Until    time.Time
	Needed   time.Time
}

// maxTTL is Cassandra's longest time to live, 20 years: a cell for a bucket further
// ahead expires before it; the task is found by the polls of its bucket then.
const maxTTL = 630_720_000

// ErrRefused marks a touch the cluster refused for what it is (invalid, say): sending it
// again would be refused again. The store wraps such errors with it.
var ErrRefused = errors.New("signal: touch refused for good")

// TouchTimeout bounds a touch sent on its own, after its caller's write.
const TouchTimeout = 10 * time.Second

// Coalesce is how long after a touch of a cell further touches of it are gathered into
// one, written at the end of that time.
const Coalesce = 20 * time.Millisecond

// Toucher touches cells for every writer of one session (internal/sessionstate). A cell
// not touched in the last Coalesce is touched at once, before Touch returns, so a process
// that schedules one task and exits still wakes workers; touches that follow within
// Coalesce are written together in the background at its end, so a busy session adds at
// most one small write per cell each Coalesce.
//
// A touch that fails is tried again in the background, RetryDelay after the failure and
// twice as long after each further one (up to MaxRetryDelay), until it applies or is no
// longer Needed. Consumers take a cell that shows no touch in a lap for proof that its
// partition holds nothing written since they last read it: an idle scan reads such a
// partition at most once, when its bucket comes round (and only if the cell of the bucket
// a lap before shows a touch), and never again before the cursor passes it, and a sweep
// looks only at touched cells. The touch that announced the cell before the write
// (Announcer) may have been read before the row landed, so a row written into the current
// bucket whose touch after the write failed, by a writer that lived on and reported the
// write done, would wait a whole lap. Retried, its touch shows it to the next idle scan
// or, once the bucket was passed, to the next sweep, as a late write. Only a writer that
// dies before its touch applies leaves a row for the ring to find: the first read of its
// partition in the next lap, which the announced cell calls for.
type Toucher struct {
	cells Writer
	log   *slog.Logger

	mu       sync.Mutex
	last     map[Entry]time.Time // when each entry's last touch was sent
	pending  map[Entry]Touch
	deferred bool // a background touch of pending is scheduled
	failures int  // failed touches in a row, for the delay of the next retry
}

// RetryDelay is how long after a failed touch it is tried again; MaxRetryDelay bounds
// that delay as failures go on.
const (
	RetryDelay    = 100 * time.Millisecond
	MaxRetryDelay = 5 * time.Second
)

// Writer writes touches of cells: the session's store (internal/store), which calls Write.
type Writer interface {
	Touch(ctx context.Context, cells []Touch) error
}

// NewToucher returns a Toucher writing through cells, warning through log (nil:
// discarded).
func NewToucher(cells Writer, log *slog.Logger) *Toucher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Toucher{cells: cells, log: log, last: map[Entry]time.Time{}, pending: map[Entry]Touch{}}
}

// Touch records that the rows in ts were written. Call it after the write completed.
// A touch that fails is retried in the background (see Toucher); the error is returned
// all the same, for the caller to log.
func (t *Toucher) Touch(ctx context.Context, ts *Touches) error {
	cells := t.gather(ts.list)
	err := t.cells.Touch(ctx, cells)
	t.settle(cells, err)
	return err
}

// settle records how a touch of cells went: a failure puts them back in pending, merged
// with any touches gathered since, and schedules a retry; a success resets the delay.
func (t *Toucher) settle(cells []Touch, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err == nil:
		if len(cells) > 0 {
			t.failures = 0
		}
		return
	case errors.Is(err, ErrRefused):
		return
	}
	now := time.Now()
	kept := 0
	for _, c := range cells {
		if !now.Before(c.Needed) {
			continue // the ring has come back to its partition: its reads find the rows
		}
		if p, ok := t.pending[c.Entry]; ok && p.Earliest.Before(c.Earliest) {
			c.Earliest = p.Earliest
		}
		t.pending[c.Entry] = c
		kept++
	}
	if kept == 0 {
		return
	}
	delay := min(RetryDelay<<min(t.failures, 16), MaxRetryDelay)
	t.failures++
	if !t.deferred {
		t.deferred = true
		time.AfterFunc(delay, t.flush)
	}
}

// gather returns the cells to touch at once, those not touched in the last Coalesce, and
// schedules the others.
func (t *Toucher) gather(cells []Touch) []Touch {
	now := time.Now()
	var out []Touch
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cells {
		if now.Sub(t.last[c.Entry]) >= Coalesce {
			t.last[c.Entry] = now
			out = append(out, c)
			continue
		}
		if p, ok := t.pending[c.Entry]; ok && p.Earliest.Before(c.Earliest) {
			c.Earliest = p.Earliest
		}
		t.pending[c.Entry] = c
		if !t.deferred {
			t.deferred = true
			time.AfterFunc(Coalesce, t.flush)
		}
	}
	for c, at := range t.last { // forget cells of buckets long gone
		if now.Sub(at) > time.Minute {
			delete(t.last, c)
		}
	}
	return out
}

func (t *Toucher) flush() {
	t.mu.Lock()
	cells := make([]Touch, 0, len(t.pending))
	now := time.Now()
	for c, touch := range t.pending {
		cells = append(cells, touch)
		t.last[c] = now
	}
	clear(t.pending)
	t.deferred = false
	t.mu.Unlock()
	if len(cells) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), TouchTimeout)
	defer cancel()
	err := t.cells.Touch(ctx, cells)
	t.settle(cells, err)
	if err != nil {
		t.log.WarnContext(ctx, "touching wake-up signals; retrying", "cells", len(cells), "error", err)
	}
}

// Row is the touch of one queue_signals row, a queue's bucket: the entries its cells give.
type Row struct {
	Queue  string
	Bucket int64
	// Shards holds the entry of each shard: the earliest row time touched in it.
	Shards map[int]uuid.UUID
	// Slots holds the entry of each slot, by its map key (the slot and the shard).
	Slots map[int]uuid.UUID
	// Until is the latest end of bucket among the cells, which the row outlives by a day.
	Until time.Time
}

// TTL is the row's time to live, in seconds, written at now.
func (r Row) TTL(now time.Time) int {
	return min(int(max(r.Until.Sub(now), 0)/time.Second)+86400, maxTTL)
}

// Group gathers cells into the rows a touch writes, one per queue and bucket, in the order
// of queue and bucket.
func Group(cells []Touch) []Row {
	type key struct {
		queue  string
		bucket int64
	}
	idx := map[key]int{}
	var rows []Row
	earliest := map[Cell]time.Time{}
	for _, c := range cells {
		k := key{c.Queue, c.Bucket}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, Row{Queue: c.Queue, Bucket: c.Bucket, Shards: map[int]uuid.UUID{}, Slots: map[int]uuid.UUID{}})
		}
		r := &rows[i]
		r.Slots[mapKey(c.Entry)] = shard.NewID(c.Earliest)
		if at, ok := earliest[c.Cell]; !ok || c.Earliest.Before(at) {
			earliest[c.Cell] = c.Earliest
			r.Shards[c.Shard] = shard.NewID(c.Earliest)
		}
		if c.Until.After(r.Until) {
			r.Until = c.Until
		}
	}
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Bucket, b.Bucket)) })
	return rows
}

// Watcher notices touches of one queue's cells.
type Watcher struct {
	cells Reader
	queue string
	seen  map[Cell]uuid.UUID
}

// Reader reads cells: the session's store (internal/store).
type Reader interface {
	Cells(ctx context.Context, queue string, from, to int64) (map[Cell]uuid.UUID, error)
}

// NewWatcher returns a Watcher of queue reading through cells.
func NewWatcher(cells Reader, queue string) *Watcher {
	return &Watcher{cells: cells, queue: queue, seen: map[Cell]uuid.UUID{}}
}

// Changed reads the cells of buckets from..to and reports whether one was touched since
// it was last read for rows visible at or after since: the time the caller last looked
// for tasks, less the clock skew it allows between processes. Earlier rows are those
// that look already saw, or rows written late, which consumers' sweeps find.
func (w *Watcher) Changed(ctx context.Context, from, to int64, since time.Time) (bool, error) {
	return w.ChangedIn(ctx, w.queue, from, to, since)
}

// ChangedIn is Changed on the cells of ring, a layout's ring of the watched queue
// (shard.Layout.Ring), whose buckets from..to are its layout's.
func (w *Watcher) ChangedIn(ctx context.Context, ring string, from, to int64, since time.Time) (bool, error) {
	cells, err := w.cells.Cells(ctx, ring, from, to)
	if err != nil {
		return false, err
	}
	changed := false
	for c, v := range cells {
		if w.seen[c] != v && !shard.IDTime(v).Before(since) {
			changed = true
		}
		w.seen[c] = v
	}
	for c := range w.seen {
		if c.Bucket < from {
			delete(w.seen, c)
		}
	}
	return changed, nil
}
