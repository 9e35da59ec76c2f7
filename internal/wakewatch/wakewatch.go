// Package wakewatch reads the wake-up signals of every queue a client works in one
// request per interval, where each queue's worker would read its own, and passes what it
// finds to the workers through the in-process bus: an idle client's requests do not grow
// with its queues. Rings whose buckets are as long share a request (the cells of a bucket
// are numbered by time), so queues on the default layout are all read at once. The reads
// are shared with the client's consumers (sessionstate.State.SharedCells), which take
// their idle scans' cells from them. Every quarter scanplan.SweepInterval, and once per
// bucket, the same request also reads the lap's slots for the consumers' sweeps and the
// cells of the buckets a lap before now's for their lookbacks: so neither do the
// consumers' own reads grow with the queues, nor does the watch send more than one
// request per interval and bucket length.
package wakewatch

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Config configures a Watch.
type Config struct {
	// Queues are the queues watched.
	Queues []string
	// Interval is how often the signals are read.
	Interval time.Duration
	// Ahead is how far past now a touched cell wakes the queue's workers: the longest a
	// worker sleeps.
	Ahead time.Duration
	// LookAhead is how far past now the buckets read reach, at least Ahead: as far as the
	// consumers' idle scans look, so that they take their cells from these reads.
	LookAhead time.Duration
	// MaxClockSkew is how far before now they reach, and how much older than the last
	// read a touched row may be and still wake a worker: writers' clocks may trail.
	MaxClockSkew time.Duration
	Clock        shardqtype.Clock
	Logger       *slog.Logger
}

// Watch watches the signals of a client's queues.
type Watch struct {
	cfg        Config
	state      *sessionstate.State
	seen       map[signal.Cell]uuid.UUID
	lookedBack map[laps]int64 // per kind of ring, the bucket a lap before now whose cells were last shared
	swept      time.Time      // when the lap's slots were last shared
}

// laps names rings whose buckets and laps are as long: their buckets a lap before now
// are one range.
type laps struct {
	bucket time.Duration
	count  int
}

// New returns a Watch of cfg.Queues on state's store, waking state's bus.
func New(state *sessionstate.State, cfg Config) *Watch {
	return &Watch{cfg: cfg, state: state, seen: map[signal.Cell]uuid.UUID{}, lookedBack: map[laps]int64{}}
}

// Run reads the signals every Interval until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	since := w.cfg.Clock.Now().Add(-w.cfg.MaxClockSkew)
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := w.cfg.Clock.Now()
		if w.read(ctx, now, since) {
			since = now.Add(-w.cfg.MaxClockSkew)
		}
	}
}

// read reads the cells of every live ring of the queues from just before now to Ahead,
// and wakes a queue's workers for each cell touched since it was last read for rows
// visible at since or later. It reports whether every read succeeded.
func (w *Watch) read(ctx context.Context, now, since time.Time) bool {
	groups := map[time.Duration][]shard.Layout{} // by bucket length
	queueOf := map[string]string{}               // ring -> queue
	ok := true
	if err := w.state.Refresh(ctx, w.cfg.Queues); err != nil {
		w.warn(ctx, "reading the queues' state", err)
	}
	for _, q := range w.cfg.Queues {
		h, err := w.state.Layouts(ctx, q)
		if err != nil {
			w.warn(ctx, "reading the queue's layouts", err, "queue", q)
			ok = false
			continue
		}
		for _, l := range h.Live() {
			groups[l.BucketDuration] = append(groups[l.BucketDuration], l)
			queueOf[l.Ring()] = q
		}
	}
	woken := map[string]bool{}
	fromOf := map[string]int64{} // ring -> the first bucket read
	sweep := w.swept.IsZero() || now.Sub(w.swept) >= scanplan.SweepInterval/4
	swept := true // every group shared a sweep
	for _, d := range slices.Sorted(maps.Keys(groups)) {
		ls := groups[d]
		l := ls[0]
		from, to := w.behind(l, now), l.Bucket(now.Add(max(w.cfg.Ahead, w.cfg.LookAhead)))
		wakeTo := l.Bucket(now.Add(w.cfg.Ahead))
		rings := make([]string, len(ls))
		for i, l := range ls {
			rings[i] = l.Ring()
			fromOf[rings[i]] = from
		}
		back := w.lookBacks(now, ls)
		r := reads{rings: rings, cells: span{from, to}, sweep: w.sweepSpan(now, ls), back: back}
		sent := time.Now()
		got, err := w.readGroup(ctx, r, sweep || len(back) > 0)
		if err != nil {
			w.warn(ctx, "reading wake-up signals", err, "rings", rings)
			ok, swept = false, false
			continue
		}
		cells := got.cellsIn(r.cells, nil)
		w.state.ShareCells(rings, from, to, sent, cells)
		for c, v := range cells {
			if c.Bucket > wakeTo {
				continue
			}
			// An entry keeps the earliest row time of its last touch only: a row due sooner,
			// touched just before, may hide behind it. So a change wakes the queue now, as a
			// worker's own read of its signals does.
			if w.seen[c] != v && !shard.IDTime(v).Before(since) {
				woken[queueOf[c.Queue]] = true
			}
			w.seen[c] = v
		}
		if got.slots == nil {
			swept = false
			continue
		}
		for _, b := range back {
			w.state.ShareLookback(b.rings, b.span.from, b.span.to, got.cellsIn(b.span, b.rings))
			w.lookedBack[b.laps] = b.span.to
		}
		w.state.ShareSweep(rings, r.sweep.from, r.sweep.to, now, got.slots, got.touched)
	}
	if swept {
		w.swept = now
	}
	for c := range w.seen {
		if from, live := fromOf[c.Queue]; !live || c.Bucket < from {
			delete(w.seen, c)
		}
	}
	// In order: the simulator's runs replay only if the same wake-ups come in the same order.
	for _, q := range slices.Sorted(maps.Keys(woken)) {
		w.state.Bus.Signalled(q, now)
	}
	return ok
}

// behind is the earliest bucket of l a consumer's idle scan at now may still hold: its
// cursor passes a bucket at its first scan after the bucket ended by the skew, and an idle
// consumer scans at least once per Ahead.
func (w *Watch) behind(l shard.Layout, now time.Time) int64 {
	return l.Bucket(now.Add(-w.cfg.MaxClockSkew-w.cfg.Ahead)) - 1
}

// span is the buckets from..to.
type span struct{ from, to int64 }

// reads is what one request of the watch serves for rings whose buckets are as long: the
// cells of idle scans and wake-ups, and, when a sweep or a lookback is due, the lap's slots
// for sweeps and the cells of a lap before.
type reads struct {
	rings []string
	cells span
	sweep span
	back  []lookback
}

// lookback is a lap before now's buckets whose cells are due to be shared.
type lookback struct {
	laps  laps
	rings []string
	span  span
}

// got is what a request returned; slots and touched are nil when only cells were read.
type got struct {
	cells   map[signal.Cell]uuid.UUID
	slots   map[signal.Cell]signal.Slots
	touched map[signal.Entry]time.Time
}

// readGroup reads the cells of r, and with all the buckets of r's sweep and lookbacks
// too: one request either way.
func (w *Watch) readGroup(ctx context.Context, r reads, all bool) (got, error) {
	if !all {
		cells, err := w.state.Store.Signals().CellsOf(ctx, r.rings, r.cells.from, r.cells.to)
		return got{cells: cells}, err
	}
	lo, hi := min(r.cells.from, r.sweep.from), max(r.cells.to, r.sweep.to)
	for _, b := range r.back {
		lo, hi = min(lo, b.span.from), max(hi, b.span.to)
	}
	cells, slots, touched, err := w.state.Store.Signals().CellsAndTouchesOf(ctx, r.rings, lo, hi)
	if err != nil {
		return got{}, err
	}
	// The sweep's share holds its own buckets only, as a read of them would have.
	for c := range slots {
		if c.Bucket < r.sweep.from || c.Bucket > r.sweep.to {
			delete(slots, c)
		}
	}
	for e := range touched {
		if e.Bucket < r.sweep.from || e.Bucket > r.sweep.to {
			delete(touched, e)
		}
	}
	return got{cells: cells, slots: slots, touched: touched}, nil
}

// cellsIn returns the cells of g in buckets s, of rings when rings is not nil.
func (g got) cellsIn(s span, rings []string) map[signal.Cell]uuid.UUID {
	out := map[signal.Cell]uuid.UUID{}
	for c, v := range g.cells {
		if c.Bucket >= s.from && c.Bucket <= s.to && (rings == nil || slices.Contains(rings, c.Queue)) {
			out[c] = v
		}
	}
	return out
}

// lookBacks returns, of rings ls, whose buckets are as long, the cells of the buckets a
// lap before those an idle scan at now may hold (behind) that are due to be shared: once
// per bucket. An idle scan reads them once per partition and lap, to prove the partition
// quiet (scanplan.Plan.Lookback). They no longer change (a writer would have to trail a
// lap), so one read serves the whole bucket.
func (w *Watch) lookBacks(now time.Time, ls []shard.Layout) []lookback {
	byLaps := map[laps][]string{}
	for _, l := range ls {
		k := laps{l.BucketDuration, l.BucketCount}
		byLaps[k] = append(byLaps[k], l.Ring())
	}
	var due []lookback
	keys := slices.SortedFunc(maps.Keys(byLaps), func(a, b laps) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.count, b.count))
	})
	for _, k := range keys {
		before := ls[0].Bucket(now) - int64(k.count)
		if w.lookedBack[k] == before {
			continue
		}
		due = append(due, lookback{k, byLaps[k], span{w.behind(ls[0], now) - int64(k.count), before}})
	}
	return due
}

// sweepSpan is the buckets a shared sweep read of rings ls, whose buckets are as long,
// holds: the lap's, and those up to SweepInterval ahead, so that a sweep due before the
// next share finds its lap in it.
func (w *Watch) sweepSpan(now time.Time, ls []shard.Layout) span {
	lap := 0
	for _, l := range ls {
		lap = max(lap, l.BucketCount)
	}
	l := ls[0]
	return span{l.Bucket(now) - int64(lap) + 1, l.Bucket(now.Add(scanplan.SweepInterval))}
}

// warn logs a failed read, unless the watch is stopping (ctx ended), which fails them all.
func (w *Watch) warn(ctx context.Context, msg string, err error, args ...any) {
	if ctx.Err() == nil {
		w.cfg.Logger.WarnContext(ctx, msg, append(args, "error", err)...)
	}
}
