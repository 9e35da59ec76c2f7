// Package wakewatch reads the wake-up signals of every queue a client works in one
// request per interval, where each queue's worker would read its own, and passes what it
// finds to the workers through the in-process bus: an idle client's requests do not grow
// with its queues. Rings whose buckets are as long share a request (the cells of a bucket
// are numbered by time), so queues on the default layout are all read at once. The reads
// are shared with the client's consumers (sessionstate.State.SharedCells), which take
// their idle scans' cells from them, with the cells of the buckets a lap before now's
// (read once per bucket) and, every quarter scanplan.SweepInterval, the lap's slots for
// their sweeps: so neither do the consumers' own reads grow with the queues.
package wakewatch

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gocql/gocql"
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
	seen       map[signal.Cell]gocql.UUID
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
	return &Watch{cfg: cfg, state: state, seen: map[signal.Cell]gocql.UUID{}, lookedBack: map[laps]int64{}}
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
		sent := time.Now()
		cells, err := w.state.Store.Signals().CellsOf(ctx, rings, from, to)
		if err != nil {
			w.warn(ctx, "reading wake-up signals", err, "rings", rings)
			ok = false
			continue
		}
		w.state.ShareCells(rings, from, to, sent, cells)
		for c, v := range cells {
			if c.Bucket > wakeTo {
				continue
			}
			// An entry keeps the earliest row time of its last touch only: a row due sooner,
			// touched just before, may hide behind it. So a change wakes the queue now, as a
			// worker's own read of its signals does.
			if w.seen[c] != v && !shard.IDTime(uuid.UUID(v)).Before(since) {
				woken[queueOf[c.Queue]] = true
			}
			w.seen[c] = v
		}
		ok = w.lookBack(ctx, now, ls) && ok
		if sweep {
			ok = w.shareSweep(ctx, now, ls) && ok
		}
	}
	if sweep && ok {
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

// lookBack shares, once per bucket, the cells of the buckets a lap before those an idle
// scan at now may hold (behind) of rings ls, whose
// buckets are as long: an idle scan reads them once per partition and lap, to prove the
// partition quiet (scanplan.Plan.Lookback). Their cells no longer change (a writer would
// have to trail a lap), so the read serves the whole bucket.
func (w *Watch) lookBack(ctx context.Context, now time.Time, ls []shard.Layout) bool {
	byLaps := map[laps][]string{}
	for _, l := range ls {
		k := laps{l.BucketDuration, l.BucketCount}
		byLaps[k] = append(byLaps[k], l.Ring())
	}
	ok := true
	keys := slices.SortedFunc(maps.Keys(byLaps), func(a, b laps) int {
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.count, b.count))
	})
	for _, k := range keys {
		rings := byLaps[k]
		before := ls[0].Bucket(now) - int64(k.count)
		if w.lookedBack[k] == before {
			continue
		}
		from := w.behind(ls[0], now) - int64(k.count)
		cells, err := w.state.Store.Signals().CellsOf(ctx, rings, from, before)
		if err != nil {
			w.warn(ctx, "reading the signals of a lap before", err, "rings", rings)
			ok = false
			continue
		}
		w.state.ShareLookback(rings, from, before, cells)
		w.lookedBack[k] = before
	}
	return ok
}

// shareSweep shares a read of the lap's slots of rings ls, whose buckets are as long, and
// of the buckets up to SweepInterval ahead, so that a sweep due before the next one finds
// its lap in it.
func (w *Watch) shareSweep(ctx context.Context, now time.Time, ls []shard.Layout) bool {
	rings := make([]string, len(ls))
	lap := 0
	for i, l := range ls {
		rings[i], lap = l.Ring(), max(lap, l.BucketCount)
	}
	l := ls[0]
	from, to := l.Bucket(now)-int64(lap)+1, l.Bucket(now.Add(scanplan.SweepInterval))
	slots, touched, err := w.state.Store.Signals().LastTouchesOf(ctx, rings, from, to)
	if err != nil {
		w.warn(ctx, "reading the lap's signals for sweeps", err, "rings", rings)
		return false
	}
	w.state.ShareSweep(rings, from, to, now, slots, touched)
	return true
}

// warn logs a failed read, unless the watch is stopping (ctx ended), which fails them all.
func (w *Watch) warn(ctx context.Context, msg string, err error, args ...any) {
	if ctx.Err() == nil {
		w.cfg.Logger.WarnContext(ctx, msg, append(args, "error", err)...)
	}
}
