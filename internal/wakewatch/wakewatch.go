// Package wakewatch reads the wake-up signals of every queue a client works in one
// request per interval, where each queue's worker would read its own, and passes what it
// finds to the workers through the in-process bus: an idle client's requests do not grow
// with its queues. Rings whose buckets are as long share a request (the cells of a bucket
// are numbered by time), so queues on the default layout are all read at once.
package wakewatch

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

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
	// Ahead is how far past now the buckets read reach: the longest a worker sleeps.
	Ahead time.Duration
	// MaxClockSkew is how far before now they reach, and how much older than the last
	// read a touched row may be and still wake a worker: writers' clocks may trail.
	MaxClockSkew time.Duration
	Clock        shardqtype.Clock
	Logger       *slog.Logger
}

// Watch watches the signals of a client's queues.
type Watch struct {
	cfg   Config
	state *sessionstate.State
	seen  map[signal.Cell]gocql.UUID
}

// New returns a Watch of cfg.Queues on state's store, waking state's bus.
func New(state *sessionstate.State, cfg Config) *Watch {
	return &Watch{cfg: cfg, state: state, seen: map[signal.Cell]gocql.UUID{}}
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
	if err := w.state.Refresh(ctx, w.cfg.Queues); err != nil && ctx.Err() == nil {
		w.cfg.Logger.WarnContext(ctx, "reading the queues' state", "error", err)
	}
	for _, q := range w.cfg.Queues {
		h, err := w.state.Layouts(ctx, q)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logger.WarnContext(ctx, "reading the queue's layouts", "queue", q, "error", err)
			}
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
	for _, d := range slices.Sorted(maps.Keys(groups)) {
		ls := groups[d]
		from, to := ls[0].Bucket(now.Add(-w.cfg.MaxClockSkew)), ls[0].Bucket(now.Add(w.cfg.Ahead))
		rings := make([]string, len(ls))
		for i, l := range ls {
			rings[i] = l.Ring()
			fromOf[rings[i]] = from
		}
		cells, err := w.state.Store.Signals().CellsOf(ctx, rings, from, to)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logger.WarnContext(ctx, "reading wake-up signals", "rings", rings, "error", err)
			}
			ok = false
			continue
		}
		for c, v := range cells {
			// An entry keeps the earliest row time of its last touch only: a row due sooner,
			// touched just before, may hide behind it. So a change wakes the queue now, as a
			// worker's own read of its signals does.
			if w.seen[c] != v && !shard.IDTime(uuid.UUID(v)).Before(since) {
				woken[queueOf[c.Queue]] = true
			}
			w.seen[c] = v
		}
	}
	for c := range w.seen {
		if from, live := fromOf[c.Queue]; !live || c.Bucket < from {
			delete(w.seen, c)
		}
	}
	for q := range woken {
		w.state.Bus.Signalled(q, now)
	}
	return ok
}
