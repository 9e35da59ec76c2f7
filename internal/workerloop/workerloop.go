// Package workerloop is the engine of package worker and of the client's queues: it
// leases batches ahead of free handlers, runs them, gathers acks, retries, snoozes and
// dead-letters, and waits sparingly when nothing is due. Package worker documents its
// settings; the client adds a pool of handlers its queues share.
package workerloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardq/shardq/internal/random"
	"github.com/shardq/shardq/internal/slots"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/shardqtype"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/series"
)

// Defaults for Config.
const (
	DefaultConcurrency     = 10
	DefaultMaxIdleInterval = 10 * time.Second
	DefaultMaxAttempts     = 25
	DefaultAckInterval     = 500 * time.Millisecond
	DefaultSignalInterval  = 250 * time.Millisecond
	DefaultBatchDelay      = 200 * time.Millisecond
	DefaultSeriesInterval  = 30 * time.Second
	// MaxPrefetch bounds an adaptive Prefetch.
	MaxPrefetch = 1000
)

const (
	// ackBatch bounds the tasks of one AckTasks call. Each call costs one conditional
	// batch per marker partition whatever its size, so under load batches grow toward
	// it within AckInterval, rather than splitting into more LWTs.
	ackBatch = consumer.MaxAcquire
	// errorPause is how long the fetch loop waits after AcquireTasks fails.
	errorPause = time.Second
	// cleanupTimeout bounds acks, retries and releases that run after a stop began.
	cleanupTimeout = 10 * time.Second
	// stopMargin is how long before a RunUntil deadline the worker stops its handlers, to
	// leave time for their acks.
	stopMargin = 250 * time.Millisecond
	// exitMargin is how long before a RunUntil deadline acks, retries, releases and the
	// settling of unknown outcomes are cut off: ending exactly at the deadline, they left
	// the worker returning just after it.
	exitMargin = 100 * time.Millisecond
	// estimateFactor is the safety factor on the average handling time that RunUntil
	// uses to decide whether another batch fits before its deadline.
	estimateFactor = 2
)

// Handler runs one task, as worker.Handler documents.
type Handler interface {
	Handle(ctx context.Context, task *consumer.Task) error
}

// Config configures a Worker: the fields of worker.Config, which documents them and
// their defaults, and Pool.
type Config struct {
	Queue           string
	Handler         Handler
	Concurrency     int
	Prefetch        int
	MaxIdleInterval time.Duration
	BatchDelay      time.Duration
	MaxAttempts     int
	Backoff         func(attempt int) time.Duration
	ExtendLeases    bool
	AckInterval     time.Duration
	SignalInterval  time.Duration
	SeriesInterval  time.Duration
	MaxClockSkew    time.Duration
	Observer        shardqtype.Observer
	Logger          *slog.Logger
	Clock           shardqtype.Clock
	// Pool, when set, is shared with the client's other queues: every task the worker
	// leases holds one of its slots too, until its handler is done, and the worker leases
	// no task ahead of a free handler, so that a slot it holds is one a handler uses.
	Pool *slots.Pool
	// SharedSignals says the client reads the queue's wake-up signals for all its queues
	// at once (internal/wakewatch) and passes them on through the bus, so the worker reads
	// none of its own.
	SharedSignals bool
}

// DefaultBackoff waits 2^(attempt-1) seconds, at most an hour, with ±10% jitter. The
// worker caps delays at the queue's MaxTimeout (19m50s with default settings, which
// DefaultBackoff exceeds from attempt 12).
func DefaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = time.Duration(1<<max(attempt-1, 0)) * time.Second
	}
	return time.Duration(float64(d) * (0.9 + 0.2*random.Float64()))
}

// Stats counts what a worker did since it was made (worker.Stats).
type Stats struct {
	Acquired      uint64 // tasks leased
	Started       uint64 // handlers started
	Succeeded     uint64
	Failed        uint64 // handler errors and panics
	Panicked      uint64
	Retried       uint64
	DeadLettered  uint64
	Acked         uint64
	LeaseLost     uint64
	LockContended uint64
	Released      uint64 // leased but never started, given back at stop
	Expired       uint64 // leased but not started: the lease ran out while it waited
	Polls         uint64 // AcquireTasks calls
	Running       int64  // handlers running now
}

// StopError says how many handlers still ran when Stop's context ended (worker.StopError).
type StopError struct {
	Running int   // handlers still running when Stop returned
	Err     error // the context's error
}

func (e *StopError) Error() string {
	return fmt.Sprintf("worker: stop: %d handlers still running: %v", e.Running, e.Err)
}

func (e *StopError) Unwrap() error { return e.Err }

// Worker runs a Handler on a queue's tasks.
type Worker struct {
	cfg      Config
	consumer *consumer.Consumer
	series   *series.Client
	signals  *signal.Watcher
	state    *sessionstate.State
	bus      *wakeup.Bus
	log      *slog.Logger
	stats    stats

	tokens chan struct{}       // one per task the worker may hold: running or prefetched
	work   chan *consumer.Task // leased tasks waiting for a handler
	acks   chan *consumer.Task // finished tasks waiting for their ack
	avg    atomic.Int64        // average handling time so far, in nanoseconds
	term   atomic.Int64        // lease term of the last batch fetched, in nanoseconds

	// mu makes Start, RunUntil and Stop safe in any order and at once: Stop sees the
	// worker either not started or started entirely.
	mu         sync.Mutex
	started    bool
	cancelWork context.CancelFunc

	stopOnce     sync.Once
	stopping     atomic.Bool
	stopFetch    chan struct{}
	fetchStopped chan struct{} // closed when the fetch loop returns
	done         chan struct{} // closed when every goroutine has returned
	cleanupCtx   context.Context
	deadline     time.Time // RunUntil's, zero otherwise; set before the goroutines start
}

// New returns a Worker for cfg.Queue, reading and writing through session.
func New(d *shardqtype.Driver, cfg Config) (*Worker, error) {
	if cfg.Handler == nil {
		return nil, defaults.Invalid("Config.Handler", "is nil")
	}
	if err := defaults.NonNegative(&cfg.Concurrency, DefaultConcurrency, "Config.Concurrency"); err != nil {
		return nil, err
	}
	for _, err := range []error{
		defaults.NonNegative(&cfg.Prefetch, 0, "Config.Prefetch"),
		defaults.NonNegative(&cfg.MaxIdleInterval, DefaultMaxIdleInterval, "Config.MaxIdleInterval"),
		defaults.NonNegative(&cfg.BatchDelay, DefaultBatchDelay, "Config.BatchDelay"),
		defaults.NonNegative(&cfg.MaxAttempts, DefaultMaxAttempts, "Config.MaxAttempts"),
		defaults.NonNegative(&cfg.AckInterval, DefaultAckInterval, "Config.AckInterval"),
		defaults.NonNegative(&cfg.SignalInterval, DefaultSignalInterval, "Config.SignalInterval"),
		defaults.NonNegative(&cfg.SeriesInterval, DefaultSeriesInterval, "Config.SeriesInterval"),
		defaults.NonNegative(&cfg.MaxClockSkew, consumer.DefaultMaxClockSkew, "Config.MaxClockSkew"),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Observer == nil {
		cfg.Observer = shardqtype.NopObserver{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st := sessionstate.For(d, cfg.Logger)
	if cfg.Clock == nil {
		// The session's cluster clock for the worker's consumer, producer and series,
		// which must agree on when leases end.
		cfg.Clock = st.Cluster
	}
	w := &Worker{cfg: cfg, state: st, bus: st.Bus, signals: signal.NewWatcher(st.Store.Signals(), cfg.Queue), log: cfg.Logger, stopFetch: make(chan struct{}),
		fetchStopped: make(chan struct{}), done: make(chan struct{})}
	c, err := consumer.New(d, consumer.Config{Queue: cfg.Queue, MaxClockSkew: cfg.MaxClockSkew,
		// An idle worker scans fully once per 1.5 idle intervals, polling at least once per
		// interval, so each full scan looks past the next one.
		LookAhead: LookAhead(cfg.MaxIdleInterval), Clock: cfg.Clock, Logger: cfg.Logger,
		Observer: shardqtype.ObserverFunc(w.observe)})
	if err != nil {
		return nil, err
	}
	w.consumer = c
	if w.series, err = series.New(d, series.Config{Clock: cfg.Clock, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	return w, nil
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot() }

// Start begins leasing and handling tasks in the background, until Stop. Cancelling ctx
// stops the worker hard: handlers' contexts end and nothing more is acked. Start returns
// an error if the worker was started before, by Start or RunUntil.
func (w *Worker) Start(ctx context.Context) error { return w.start(ctx, time.Time{}) }

// start starts the worker, with RunUntil's deadline or none.
func (w *Worker) start(ctx context.Context, deadline time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker: already started")
	}
	w.started, w.deadline = true, deadline
	slots := w.cfg.Concurrency + w.cfg.Prefetch
	if w.cfg.Prefetch == 0 {
		slots = w.cfg.Concurrency + MaxPrefetch
	}
	if !w.deadline.IsZero() || w.cfg.Pool != nil {
		// Nothing waits in line when a deadline rules, or for a pool's slot: a slot held is
		// one a handler uses.
		slots = w.cfg.Concurrency
	}
	w.tokens = make(chan struct{}, slots)
	for range slots {
		w.tokens <- struct{}{}
	}
	w.work = make(chan *consumer.Task, slots)
	w.acks = make(chan *consumer.Task, slots)
	cleanupBy := deadline.Add(-exitMargin)
	if !deadline.IsZero() {
		// Settling an unknown outcome outlives cancellation, but not RunUntil's deadline:
		// a swap or release cut off when the handlers are cancelled leaves its tasks to
		// come back after their timeout.
		ctx = lwt.SettleBy(ctx, cleanupBy)
	}
	workCtx, cancel := context.WithCancel(ctx)
	w.cancelWork = cancel
	// Acks, retries and releases outlive a cancelled ctx, but not RunUntil's deadline.
	w.cleanupCtx = context.WithoutCancel(ctx)
	cancelCleanup := func() {}
	if !deadline.IsZero() {
		w.cleanupCtx, cancelCleanup = context.WithDeadline(w.cleanupCtx, cleanupBy)
	}

	var handlers sync.WaitGroup
	for range w.cfg.Concurrency {
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			w.handle(workCtx)
		}()
	}
	ackerDone := make(chan struct{})
	go func() {
		defer close(ackerDone)
		w.ack()
	}()
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		w.keepSeries(workCtx)
	}()
	maintainerDone := make(chan struct{})
	go func() {
		defer close(maintainerDone)
		w.maintain(workCtx)
	}()
	go func() {
		w.fetch(workCtx)
		close(w.fetchStopped)
		<-keeperDone
		<-maintainerDone
		close(w.work)
		handlers.Wait()
		close(w.acks)
		<-ackerDone
		cancel()
		cancelCleanup()
		close(w.done)
	}()
	return nil
}

// Stop stops leasing tasks, gives back leased tasks no handler started, lets running
// handlers finish until ctx ends, and acks those that succeeded. When ctx ends first,
// Stop cancels the remaining handlers' contexts and returns at once a *StopError saying
// how many were still running: their tasks come back after their timeout, and what
// finished goes on being acked in the background (a later Stop waits for it). Stop
// returns an error if the worker was not started. It may be called more than once, and
// from several goroutines, also while Start runs; each call waits.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started, cancelWork := w.started, w.cancelWork
	w.mu.Unlock()
	if !started {
		return errors.New("worker: not started")
	}
	w.stopOnce.Do(func() {
		w.stopping.Store(true)
		close(w.stopFetch)
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-w.done: // stopped already, as a Stop that ended earlier found out
		return nil
	default:
	}
	cancelWork()
	return &StopError{Running: int(w.stats.running.Load()), Err: ctx.Err()}
}

// RunUntil works until shortly before deadline, for processes that a scheduler starts
// every so often. It stops leasing tasks when the average handling time so far, doubled,
// would overrun the deadline. A little before the deadline it cancels the handlers still
// running (they are not acked), leaving the rest for acks, and it returns by the
// deadline, by when every ack, retry and release has ended too. It returns a *StopError
// when handlers that ignore their context were still running at the deadline, and an
// error if the worker was started before. No tasks are prefetched in this mode.
func (w *Worker) RunUntil(ctx context.Context, deadline time.Time) error {
	if err := w.start(ctx, deadline); err != nil {
		return err
	}
	stopAt := deadline.Add(-stopMargin)
	timer := time.NewTimer(time.Until(stopAt))
	defer timer.Stop()
	select {
	case <-w.fetchStopped: // the estimate says no further batch fits
	case <-timer.C:
	case <-ctx.Done():
	}
	err := w.stopBy(ctx, stopAt)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = w.stopBy(ctx, deadline) // handlers are cancelled; the margin is for acks
	}
	return err
}

// stopBy stops the worker, waiting until at at the latest.
func (w *Worker) stopBy(ctx context.Context, at time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, at)
	defer cancel()
	return w.Stop(ctx)
}

// fetch leases tasks while there are free slots, and waits sparingly when none is due.
func (w *Worker) fetch(ctx context.Context) {
	sub := w.bus.Subscribe(w.cfg.Queue)
	defer sub.Cancel()
	if w.cfg.Pool != nil {
		defer w.cfg.Pool.Idle(w.cfg.Queue)
	}
	paused := false
	var prev time.Time // when the last fetch that found tasks began
	for {
		n, ok := w.slots(ctx)
		if !ok {
			return
		}
		looked := time.Now()
		got, err := w.acquire(ctx, n)
		if w.cfg.Pool != nil && (err != nil || got < n) {
			w.cfg.Pool.Idle(w.cfg.Queue)
		}
		if p := errors.Is(err, shardqtype.ErrQueuePaused); p != paused {
			paused = p
			w.log.InfoContext(ctx, map[bool]string{true: "queue paused: taking no tasks until it is resumed",
				false: "queue resumed"}[p], "queue", w.cfg.Queue)
		}
		var wake, notBefore time.Time
		switch {
		case paused:
			// Neither signals nor wake-ups matter until the pause ends: look again once the
			// session's read of it may have changed.
			wake = time.Now().Add(shardqtype.SettingsRefresh)
			if !w.sleep(ctx, wake) {
				return
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			w.log.ErrorContext(ctx, "acquiring tasks", "queue", w.cfg.Queue, "error", err)
			wake = time.Now().Add(errorPause)
		case got == n:
			// There may be more due (a backlog): fetch again once a slot frees.
			prev = looked
			continue
		default:
			wake = w.idleWake()
			if got > 0 {
				// Everything due was taken, and tasks are coming due one after another:
				// gather them into fewer fetches, each taking many from every partition.
				notBefore = looked.Add(w.linger(got, n, looked.Sub(prev)))
				prev = looked
			}
		}
		if !w.wait(ctx, sub, wake, notBefore, looked) {
			return
		}
	}
}

// lingerReach is how many lingers back a fetch's last predecessor that found tasks may
// lie for the fetch to linger (see linger).
const lingerReach = 5

// linger is how long after a fetch that took got of the n tasks it asked for, and so
// everything due, the next waits: BatchDelay, or less when tasks come due fast enough to
// fill a fetch sooner, at the pace of this one, which took what came due over since (the
// time since the last fetch that found tasks). A fetch costs about the same for one task
// as for hundreds (a read, a lock and a swap per partition), so one that waits for a
// stream to gather takes many per partition at the cost of at most BatchDelay of
// lateness; one that fills up goes on at once.
//
// A fetch whose last predecessor that found tasks lies more than lingerReach lingers
// back does not linger: it took the first tasks of a stream that was quiet before (its
// pace unknown: tasks written in a burst and coming due from now on), or those of a
// stream so sparse that a linger would gather a fifth of this fetch or less, for a full
// linger of lateness.
func (w *Worker) linger(got, n int, since time.Duration) time.Duration {
	d := w.cfg.BatchDelay
	if since > lingerReach*d {
		return 0
	}
	if got > 0 && since > 0 {
		d = min(d, time.Duration(float64(since)*float64(n)/float64(got)))
	}
	return d
}

// LookAhead is how far ahead of now a worker idle for up to maxIdle looks for tasks
// (its consumer's LookAhead): three waits, so a full scan every one and a half finds what
// comes due before the next.
func LookAhead(maxIdle time.Duration) time.Duration { return 3 * maxIdle }

// keepSeries repairs the queue's series at start and then every SeriesInterval, with
// jitter so that workers started together spread their reads, until fetching stops.
func (w *Worker) keepSeries(ctx context.Context) {
	for {
		if err := w.series.Keep(ctx, w.cfg.Queue); err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "checking the queue's series", "queue", w.cfg.Queue, "error", err)
		}
		jitter := random.N(w.cfg.SeriesInterval/5+1) - w.cfg.SeriesInterval/10
		select {
		case <-time.After(w.cfg.SeriesInterval + jitter):
		case <-w.stopFetch:
			return
		case <-ctx.Done():
			return
		}
	}
}

// maintainEvery is how often a worker calls its consumer's Maintain, which looks whether
// an old layout is drained when its own interval (30 s or more) says so.
const maintainEvery = 5 * time.Second

// maintain runs the consumer's upkeep (consumer.Consumer.Maintain) beside the fetches,
// so that the reads of a layout change's draining never delay a take, until fetching
// stops (which also ends a look under way). Its failures are warned of at most once a
// minute: the fetch loop already reports a session that fails every request.
func (w *Worker) maintain(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopFetch:
			cancel()
		case <-ctx.Done():
		}
	}()
	var warned time.Time
	for {
		if err := w.consumer.Maintain(ctx); err != nil && ctx.Err() == nil && time.Since(warned) >= time.Minute {
			warned = time.Now()
			w.log.WarnContext(ctx, "maintaining the queue", "queue", w.cfg.Queue, "error", err)
		}
		select {
		case <-time.After(maintainEvery):
		case <-w.stopFetch:
			return
		case <-ctx.Done():
			return
		}
	}
}

// slots waits for a free slot and gathers the slots of one fetch. It reports false,
// holding none, when the worker is stopping or no batch fits before RunUntil's deadline.
func (w *Worker) slots(ctx context.Context) (int, bool) {
	select {
	case <-w.tokens:
	case <-w.stopFetch:
		return 0, false
	case <-ctx.Done():
		return 0, false
	}
	size := w.fetchSize()
	n, ok := w.gather(ctx, 1, size)
	if !ok || !w.fits() {
		w.giveBack(n)
		return 0, false
	}
	ask := min(n, max(1, size-len(w.work)), consumer.MaxAcquire)
	w.giveBack(n - ask)
	if w.cfg.Pool != nil {
		got := w.cfg.Pool.Acquire(ctx, w.cfg.Queue, ask, w.stopFetch)
		w.giveBack(ask - got)
		if got == 0 {
			return 0, false
		}
		ask = got
	}
	return ask, true
}

// acquire leases up to n tasks, holding a slot each, and hands them to the handlers. It
// gives back the slots of the tasks it did not get, and returns how many it got.
func (w *Worker) acquire(ctx context.Context, n int) (int, error) {
	tasks, err := w.consumer.AcquireTasks(ctx, n)
	w.stats.polls.Add(1)
	w.finished(n - len(tasks))
	if len(tasks) > 0 {
		w.term.Store(int64(tasks[0].Deadline.Sub(w.cfg.Clock.Now())))
	}
	if err != nil {
		return 0, err
	}
	w.stats.acquired.Add(uint64(len(tasks)))
	for _, t := range tasks {
		w.work <- t // never blocks: work has a place for every token
	}
	return len(tasks), nil
}

// idleWake is when to fetch again after a fetch got less than it asked for, so nothing
// more is due now: at the earliest known due time or after the idle interval (jittered
// so workers spread out), whichever is first.
func (w *Worker) idleWake() time.Time {
	wake := time.Now().Add(time.Duration(float64(w.cfg.MaxIdleInterval) * (0.8 + 0.2*random.Float64())))
	// NextDue is by the worker's clock; the timer runs on this host's. Taken as a host
	// time, a due time by a clock that trails would wake the worker before it is due by
	// that clock, again and again, for as long as the clocks differ.
	if next := w.consumer.NextDue(); !next.IsZero() {
		if at := time.Now().Add(next.Sub(w.cfg.Clock.Now())); at.Before(wake) {
			return at
		}
	}
	return wake
}

// wait sleeps until wake, or until a task due before then is scheduled: by a producer
// in this process (the in-process bus), or in another (the queue's wake-up signals,
// read every SignalInterval; touches before looked, less the allowed clock skew, concern
// tasks the last fetch already looked for), but not before notBefore. It reports false
// when the worker is stopping.
func (w *Worker) wait(ctx context.Context, sub *wakeup.Sub, wake, notBefore, looked time.Time) bool {
	wake = later(wake, notBefore)
	timer := time.NewTimer(time.Until(wake))
	defer timer.Stop()
	var ticks <-chan time.Time
	if !w.cfg.SharedSignals {
		tick := time.NewTicker(w.cfg.SignalInterval)
		defer tick.Stop()
		ticks = tick.C
	}
	for {
		select {
		case <-timer.C:
			return true
		case <-ticks:
			select {
			case <-timer.C:
				// Both came due at once: the wake-up, without a read of the signals. (The
				// simulator's runs replay only if such ties go one way.)
				return true
			default:
			}
			if wake.After(notBefore) && w.signalled(ctx, wake, looked) {
				if time.Now().Before(notBefore) {
					wake = notBefore
					timer.Reset(time.Until(wake))
					continue
				}
				return true
			}
		case <-sub.C:
			// The bus tells due times by the worker's clock; its timers run on this host's.
			if due := sub.Take(); !due.IsZero() {
				if at := time.Now().Add(due.Sub(w.cfg.Clock.Now())); at.Before(wake) {
					wake = later(at, notBefore)
					timer.Reset(time.Until(wake))
				}
			}
		case <-w.stopFetch:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// sleep waits until at, and reports false when the worker is stopping.
func (w *Worker) sleep(ctx context.Context, at time.Time) bool {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-w.stopFetch:
		return false
	case <-ctx.Done():
		return false
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// signalled reads the wake-up signals of the buckets from just before now to wake.
func (w *Worker) signalled(ctx context.Context, wake, looked time.Time) bool {
	q, err := w.consumer.Queue(ctx)
	if err != nil {
		w.log.WarnContext(ctx, "loading the queue's settings", "queue", w.cfg.Queue, "error", err)
		return false
	}
	// Every layout that may still hold rows: rows due before a change takes effect go to
	// the old one (see internal/layouts).
	h, err := w.state.Layouts(ctx, q.Name)
	if err != nil {
		w.log.WarnContext(ctx, "reading the queue's layouts", "queue", w.cfg.Queue, "error", err)
		return false
	}
	now := w.cfg.Clock.Now()
	changed := false
	for _, l := range h.Live() {
		from, to := l.Bucket(now.Add(-w.cfg.MaxClockSkew)), l.Bucket(now.Add(time.Until(wake)))
		c, err := w.signals.ChangedIn(ctx, l.Ring(), from, max(from, to), looked.Add(-w.cfg.MaxClockSkew))
		if err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "reading wake-up signals", "queue", w.cfg.Queue, "error", err)
		}
		changed = changed || c
	}
	return changed
}

// gather collects free slots, n of them held already, for one fetch. While handlers
// still have more than half a fetch waiting, it waits for more slots to free up, so that
// a backlog is leased in large batches (each costs two LWTs whatever its size) and the
// next batch arrives before the handlers run dry. It reports false when stopping.
func (w *Worker) gather(ctx context.Context, n, size int) (int, bool) {
	lowWater := max(w.cfg.Concurrency, size/2)
	for {
		for free := true; free; {
			select {
			case <-w.tokens:
				n++
			default:
				free = false
			}
		}
		if n >= size || len(w.work) <= lowWater {
			return n, true
		}
		select {
		case <-w.tokens:
			n++
		case <-time.After(time.Millisecond):
		case <-w.stopFetch:
			return n, false
		case <-ctx.Done():
			return n, false
		}
	}
}

// fetchSize is how many tasks one fetch may hold waiting for handlers, counting those
// already waiting: Concurrency plus Prefetch, or with an adaptive Prefetch, as many as
// the handlers start within a quarter of a lease term at their average speed.
func (w *Worker) fetchSize() int {
	c := w.cfg.Concurrency
	switch {
	case !w.deadline.IsZero(), w.cfg.Pool != nil:
		return c
	case w.cfg.Prefetch > 0:
		return c + w.cfg.Prefetch
	}
	avg, term := w.avg.Load(), w.term.Load()
	if avg <= 0 || term <= 0 {
		return 2 * c
	}
	ahead := int64(c) * (term / 4) / avg
	return c + int(min(ahead, MaxPrefetch))
}

// fits reports whether another batch can finish before RunUntil's deadline.
func (w *Worker) fits() bool {
	if w.deadline.IsZero() {
		return true
	}
	need := time.Duration(w.avg.Load()) * estimateFactor
	return time.Now().Add(need).Before(w.deadline.Add(-stopMargin))
}

func (w *Worker) giveBack(n int) {
	for range n {
		w.tokens <- struct{}{}
	}
}

// finished gives back the slots of n tasks fetched (or asked for and not got), the pool's too.
func (w *Worker) finished(n int) {
	w.giveBack(n)
	if w.cfg.Pool != nil {
		w.cfg.Pool.Release(w.cfg.Queue, n)
	}
}

// handle runs tasks from the work queue until it closes.
func (w *Worker) handle(ctx context.Context) {
	for t := range w.work {
		switch {
		case !w.cfg.Clock.Now().Before(t.Deadline):
			// Its lease ran out while it waited, and another worker may hold it by now: it is
			// neither started nor given back, and comes back by its timeout to whoever takes it.
			w.stats.expired.Add(1)
			w.log.WarnContext(ctx, "dropping a task whose lease ran out before it started", "queue", t.Queue, "task_id", t.ID)
		case w.stopping.Load():
			w.release(t)
		default:
			w.run(ctx, t)
		}
		w.finished(1)
	}
}

// release gives back a task leased but never started, so it need not wait for its timeout.
func (w *Worker) release(t *consumer.Task) {
	ctx, cancel := context.WithTimeout(w.cleanupCtx, cleanupTimeout)
	defer cancel()
	if err := w.consumer.Retry(ctx, t, 0); err != nil {
		w.log.WarnContext(ctx, "giving back an unstarted task", "queue", w.cfg.Queue, "task_id", t.ID, "error", err)
		return
	}
	w.stats.released.Add(1)
}

func (w *Worker) run(ctx context.Context, t *consumer.Task) {
	started := time.Now()
	w.stats.running.Add(1)
	defer w.stats.running.Add(-1)
	w.observe(ctx, shardqtype.TaskStarted{Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt,
		Lateness: w.cfg.Clock.Now().Sub(t.DueAt)})

	// held is the task as this worker holds it: extensions move its timeout marker and
	// Deadline, while the handler's copy stays as given.
	held := *t
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaseDone := make(chan struct{})
	var leaseEnded bool
	go func() {
		defer close(leaseDone)
		leaseEnded = w.keepLease(hctx, cancel, &held)
	}()
	err, panicked := w.call(hctx, t)
	cancel()
	<-leaseDone

	took := time.Since(started)
	w.average(took)
	w.observe(ctx, shardqtype.TaskFinished{Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt,
		Duration: took, Err: err, Panicked: panicked})
	var snoozed *shardqtype.SnoozeError
	var cancelled *shardqtype.CancelError
	switch {
	case err == nil:
		w.acks <- &held
	case ctx.Err() != nil || leaseEnded:
		// Stopped hard mid-task, or its lease ran out: it did not finish in time, so it
		// is neither acked nor retried; it comes back by its timeout, attempt + 1.
	case errors.As(err, &snoozed):
		w.snooze(&held, snoozed.Delay)
	case errors.As(err, &cancelled), t.Attempt >= taskmeta.MaxAttemptsOr(t.Headers, w.cfg.MaxAttempts):
		w.deadLetter(&held, err)
	default:
		w.retry(&held, err)
	}
}

// call runs the handler, turning a panic into an error that carries its stack.
func (w *Worker) call(ctx context.Context, t *consumer.Task) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			err, panicked = fmt.Errorf("worker: handler panicked: %v\n%s", p, debug.Stack()), true
		}
	}()
	return w.cfg.Handler.Handle(ctx, t), false
}

// keepLease ends the handler's context when the lease of held ends and, with
// ExtendLeases, renews it by the task's timeout halfway through each term (at once when
// less than half is left). A failed extension is tried again a quarter of a term later,
// or at the deadline if that comes first. It reports whether the lease ended (ran out or
// was lost) before the handler returned.
func (w *Worker) keepLease(ctx context.Context, cancel context.CancelFunc, held *consumer.Task) bool {
	term := held.Timeout
	failed := false // the last extension failed
	for {
		left := held.Deadline.Sub(w.cfg.Clock.Now())
		wait := left
		switch {
		case !w.cfg.ExtendLeases: // only the lease's end to wait for
		case failed:
			wait = min(term/4, left)
		default:
			wait = left - term/2
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
		if !w.cfg.ExtendLeases || !w.cfg.Clock.Now().Before(held.Deadline) {
			w.log.WarnContext(ctx, "task outlived its lease", "queue", held.Queue, "task_id", held.ID)
			cancel()
			return true
		}
		err := w.consumer.Extend(ctx, held, term)
		switch {
		case errors.Is(err, consumer.ErrLeaseLost):
			cancel()
			return true
		case err != nil && ctx.Err() == nil:
			w.log.WarnContext(ctx, "extending a lease", "queue", held.Queue, "task_id", held.ID, "error", err)
		}
		failed = err != nil
	}
}

func (w *Worker) retry(t *consumer.Task, cause error) {
	ctx, cancel := context.WithTimeout(w.cleanupCtx, cleanupTimeout)
	defer cancel()
	var delay time.Duration
	q, err := w.consumer.Queue(ctx)
	if err == nil {
		// Retry refuses a delay the queue cannot hold; the longest it can is the most useful.
		delay = min(max(w.cfg.Backoff(t.Attempt), 0), q.MaxTimeout())
		err = w.consumer.Retry(ctx, t, delay)
	}
	if err != nil {
		// The task comes back when its lease ends instead.
		w.log.WarnContext(ctx, "scheduling a retry", "queue", t.Queue, "task_id", t.ID, "error", err)
		return
	}
	w.observe(ctx, shardqtype.Retried{Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Delay: delay, Err: cause})
}

// snooze gives t back to be delivered again after delay, cut to the queue's MaxTimeout,
// without counting the delivery as an attempt.
func (w *Worker) snooze(t *consumer.Task, delay time.Duration) {
	ctx, cancel := context.WithTimeout(w.cleanupCtx, cleanupTimeout)
	defer cancel()
	q, err := w.consumer.Queue(ctx)
	if err == nil {
		delay = min(max(delay, 0), q.MaxTimeout())
		err = w.consumer.Snooze(ctx, t, delay)
	}
	if err != nil {
		// The task comes back when its lease ends instead, as an attempt.
		w.log.WarnContext(ctx, "snoozing a task", "queue", t.Queue, "task_id", t.ID, "error", err)
		return
	}
	w.observe(ctx, shardqtype.Snoozed{Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Delay: delay})
}

func (w *Worker) deadLetter(t *consumer.Task, cause error) {
	ctx, cancel := context.WithTimeout(w.cleanupCtx, cleanupTimeout)
	defer cancel()
	if err := w.consumer.DeadLetter(ctx, t, cause); err != nil {
		w.log.WarnContext(ctx, "dead-lettering", "queue", t.Queue, "task_id", t.ID, "error", err)
		return
	}
	w.observe(ctx, shardqtype.DeadLettered{Queue: t.Queue, TaskID: t.ID, Attempt: t.Attempt, Err: cause})
}

// ack batches finished tasks: a batch goes when it is full, AckInterval after its first
// task, or when the lease of one of its tasks is about to end (ackBy), and whatever is
// left goes when the worker stops.
func (w *Worker) ack() {
	var batch []*consumer.Task
	var by time.Time // when the batch must go
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		timer.Stop()
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(w.cleanupCtx, cleanupTimeout)
		defer cancel()
		// Acks whose lease has ended go in a call of their own, after the others: one
		// whose task another consumer took since fails its partition's conditional batch,
		// which AckTasks then acks task by task, and would take the live ones with it.
		now := w.cfg.Clock.Now()
		var live, ended []*consumer.Task
		for _, t := range batch {
			if now.Before(t.Deadline) {
				live = append(live, t)
			} else {
				ended = append(ended, t)
			}
		}
		for _, tasks := range [][]*consumer.Task{live, ended} {
			if len(tasks) == 0 {
				continue
			}
			if err := w.consumer.AckTasks(ctx, tasks...); err != nil {
				w.log.WarnContext(ctx, "acking tasks", "queue", w.cfg.Queue, "tasks", len(tasks), "error", err)
			}
		}
		batch, by = batch[:0], time.Time{}
	}
	for {
		select {
		case t, ok := <-w.acks:
			if !ok {
				flush()
				return
			}
			batch = append(batch, t)
			if at := w.ackBy(t, len(batch) == 1); by.IsZero() || at.Before(by) {
				by = at
				timer.Reset(time.Until(by))
			}
			if len(batch) < ackBatch && time.Now().Before(by) {
				continue
			}
		case <-timer.C:
		}
		// Due now. Acks that finished while an earlier flush was under way are late too:
		// they go in this batch rather than one call each, or a slow node that delayed
		// one flush makes every ack after it a conditional batch of its own, which falls
		// further behind until leases run out under the acks.
		var open bool
		batch, open = w.gatherAcks(batch)
		flush()
		if !open {
			return
		}
	}
}

// gatherAcks adds the acks already waiting to batch, up to ackBatch, and reports false
// once acks is closed.
func (w *Worker) gatherAcks(batch []*consumer.Task) ([]*consumer.Task, bool) {
	for len(batch) < ackBatch {
		select {
		case t, ok := <-w.acks:
			if !ok {
				return batch, false
			}
			batch = append(batch, t)
		default:
			return batch, true
		}
	}
	return batch, true
}

// ackBy is when the ack of t, which just finished, must go (by the real clock): when it
// is the first of a batch, AckInterval from now, and in any case before its lease ends,
// by the worker's clock, less twice AckInterval for the ack's own way there.
func (w *Worker) ackBy(t *consumer.Task, first bool) time.Time {
	now := time.Now()
	at := now.Add(t.Deadline.Sub(w.cfg.Clock.Now()) - 2*w.cfg.AckInterval)
	if soon := now.Add(w.cfg.AckInterval); first && soon.Before(at) {
		at = soon
	}
	return at
}

// average folds one handling time into the running average.
func (w *Worker) average(d time.Duration) {
	for {
		old := w.avg.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if w.avg.CompareAndSwap(old, next) {
			return
		}
	}
}

// observe counts an event and passes it on to the configured Observer.
func (w *Worker) observe(ctx context.Context, e shardqtype.Event) {
	w.stats.count(e)
	w.cfg.Observer.Observe(ctx, e)
}
