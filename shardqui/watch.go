package shardqui

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shardq/shardq/inspect"
)

// idleIntervals is how many refresh intervals a queue's loop runs on after the last page
// asked for its counts: an open page polls once an interval, so a loop outlives the last
// page closed on its queue by at most this many passes.
const idleIntervals = 3

// historySize is how many passes' counts a queue's loop keeps for the chart of counts over
// time: 10 minutes at the default interval.
const historySize = 120

// sample is one pass's counts, a point of the chart.
type sample struct {
	At       int64 `json:"at"` // Unix milliseconds
	Due      int   `json:"due"`
	InFlight int   `json:"in_flight"`
	Retrying int   `json:"retrying"`
}

// snapshot is what a queue's loop last found.
type snapshot struct {
	stats   *inspect.Stats // the last pass that returned; nil when none did
	err     error          // the last pass's error, if it failed
	history []sample
}

// watch is one queue's refresh loop.
type watch struct {
	ready chan struct{} // closed when the first pass has ended
	mu    sync.Mutex
	snap  snapshot
	used  time.Time // when a page last asked (local, monotonic: it only times the loop out)
}

// watcher runs one refresh loop per queue that open pages look at, so that however many
// pages are open, the cluster sees one inspect.Stats pass per queue and interval, as from
// one `shardq stats --watch`.
type watcher struct {
	in       *inspect.Inspector
	interval time.Duration
	log      *slog.Logger
	ctx      context.Context
	stop     context.CancelFunc
	loops    sync.WaitGroup

	mu      sync.Mutex
	watches map[string]*watch
}

func newWatcher(in *inspect.Inspector, interval time.Duration, log *slog.Logger) *watcher {
	ctx, stop := context.WithCancel(context.Background())
	return &watcher{in: in, interval: interval, log: log, ctx: ctx, stop: stop, watches: map[string]*watch{}}
}

// get returns queue's latest counts, starting its loop if none runs, and waiting for
// the loop's first pass (or ctx) if it has not ended yet.
func (w *watcher) get(ctx context.Context, queue string) (snapshot, error) {
	w.mu.Lock()
	if w.ctx.Err() != nil {
		w.mu.Unlock()
		return snapshot{}, w.ctx.Err()
	}
	q := w.watches[queue]
	if q == nil {
		q = &watch{ready: make(chan struct{})}
		w.watches[queue] = q
		w.loops.Add(1)
		go w.run(queue, q)
	}
	q.mu.Lock()
	q.used = time.Now()
	q.mu.Unlock()
	w.mu.Unlock()
	select {
	case <-q.ready:
	case <-ctx.Done():
		return snapshot{}, ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.snap
	s.history = append([]sample(nil), s.history...)
	return s, nil
}

// run counts queue once an interval until no page has asked for idleIntervals of them.
func (w *watcher) run(queue string, q *watch) {
	defer w.loops.Done()
	first := true
	for {
		st, err := w.in.Stats(w.ctx, queue, inspect.StatsOptions{})
		q.mu.Lock()
		q.snap.err = err
		if err == nil {
			q.snap.stats = st
			q.snap.history = append(q.snap.history, sample{At: st.At.UnixMilli(), Due: st.Total.Due + st.Total.DueAgain,
				InFlight: st.Total.InFlight, Retrying: st.Total.Retrying})
			if n := len(q.snap.history); n > historySize {
				q.snap.history = q.snap.history[n-historySize:]
			}
		} else if w.ctx.Err() == nil {
			w.log.Warn("shardqui: counting a queue failed", "queue", queue, "err", err)
		}
		q.mu.Unlock()
		if first {
			close(q.ready)
			first = false
		}
		t := time.NewTimer(w.interval)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		w.mu.Lock()
		q.mu.Lock()
		idle := time.Since(q.used) > idleIntervals*w.interval
		q.mu.Unlock()
		if idle {
			delete(w.watches, queue)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// running tells how many loops run, for tests.
func (w *watcher) running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// close stops every loop and waits for them.
func (w *watcher) close() {
	w.mu.Lock()
	w.stop()
	w.mu.Unlock()
	w.loops.Wait()
}
