// Package worker runs handlers on a queue's tasks: it leases batches ahead of free
// handlers, runs up to Concurrency handlers at once, batches acks, retries failures with
// backoff up to MaxAttempts and then dead-letters them, and polls Cassandra sparingly when
// there is nothing due.
package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/workerloop"
	"github.com/shardq/shardq/shardqtype"
)

// Defaults for Config.
const (
	DefaultConcurrency     = workerloop.DefaultConcurrency
	DefaultMaxIdleInterval = workerloop.DefaultMaxIdleInterval
	DefaultMaxAttempts     = workerloop.DefaultMaxAttempts
	DefaultAckInterval     = workerloop.DefaultAckInterval
	DefaultSignalInterval  = workerloop.DefaultSignalInterval
	DefaultBatchDelay      = workerloop.DefaultBatchDelay
	DefaultSeriesInterval  = workerloop.DefaultSeriesInterval
	// MaxPrefetch bounds an adaptive Prefetch.
	MaxPrefetch = workerloop.MaxPrefetch
)

// Handler runs one task. Returning nil acks the task; an error retries it (or
// dead-letters it after MaxAttempts); a *shardqtype.SnoozeError (shardq.Snooze) gives it
// back for its Delay without counting the attempt; a *shardqtype.CancelError
// (shardq.Cancel) dead-letters it at once. ctx ends when the task's lease does, or when the
// worker is stopped hard.
type Handler interface {
	Handle(ctx context.Context, task *consumer.Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, task *consumer.Task) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, task *consumer.Task) error { return f(ctx, task) }

// Config configures a Worker.
type Config struct {
	// Queue names the queue to work on. Required.
	Queue string
	// Handler runs each task. Required.
	Handler Handler
	// Concurrency is how many handlers run at once. Defaults to DefaultConcurrency.
	Concurrency int
	// Prefetch is how many tasks may be leased ahead of free handlers, so handlers do
	// not wait on Cassandra while work is due. Zero adapts it to the handlers' measured
	// speed: as many as they can start within a quarter of a lease term, up to
	// MaxPrefetch, so a backlog is fetched in large batches and fast handlers never wait,
	// while slow handlers hold few tasks whose leases would run out in line.
	// Defaults to 0 (adaptive).
	Prefetch int
	// MaxIdleInterval is the longest the worker waits between polls of the queue's
	// partitions when nothing is due. Each poll looks this far ahead, so it wakes for
	// tasks coming due meanwhile, and it wakes at once for tasks scheduled since (through
	// the wake-up signals, or the in-process bus); a longer interval delays only what
	// those miss: leases of crashed workers, and writes later than MaxClockSkew.
	// Defaults to DefaultMaxIdleInterval.
	MaxIdleInterval time.Duration
	// BatchDelay is the shortest time between two fetches while tasks come due steadily:
	// after a fetch that found some tasks but fewer than it asked for (so everything due),
	// tasks coming due wait up to this long, or less when they come fast enough to fill a
	// fetch sooner, so that each fetch, whose reads and lightweight transactions cost the
	// same for one task as for hundreds, takes many from every partition. It adds at most
	// BatchDelay to a task's lateness, nothing while a backlog fills every fetch, nothing
	// after a fetch that found none, and nothing after the first fetch that finds tasks
	// when none did for five BatchDelays. Defaults to DefaultBatchDelay.
	BatchDelay time.Duration
	// MaxAttempts is how many deliveries a failing task gets before it is dead-lettered.
	// Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Backoff gives the delay before the next delivery after a failure on attempt n.
	// The worker cuts a delay longer than the queue's MaxTimeout to it, and a negative one
	// to zero. Defaults to DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// ExtendLeases renews each running task's lease by the task's timeout halfway through
	// each term, for handlers that may outlast it. Defaults to false.
	ExtendLeases bool
	// AckInterval is the longest a finished task waits for its ack to be batched: acks
	// go in one conditional batch per partition of their markers however many there are,
	// so under a steady stream a longer interval gathers the tasks of several fetches
	// into each. A task whose lease ends sooner than twice this is acked before then, so
	// no ack waits past its lease. A worker that dies loses the acks it was gathering:
	// those tasks run again at their deadline. Defaults to DefaultAckInterval.
	AckInterval time.Duration
	// SignalInterval is how often an idle worker reads the queue's wake-up signals,
	// which producers in any process touch when they schedule tasks: one small read, so
	// a task scheduled for now elsewhere starts within about this long.
	// Defaults to DefaultSignalInterval.
	SignalInterval time.Duration
	// SeriesInterval is how often the worker checks the queue's recurring series
	// (package series) for one whose consumer or scheduler died between two steps, and
	// repairs it: one read per series. Defaults to DefaultSeriesInterval.
	SeriesInterval time.Duration
	// MaxClockSkew is passed to the consumer. Defaults to consumer.DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Observer receives every consumer and worker event. Defaults to shardqtype.NopObserver.
	Observer shardqtype.Observer
	// Logger receives errors and debug events. Defaults to a logger that discards.
	Logger *slog.Logger
	// Clock tells the time for due times and leases. Defaults to the cluster's time, as
	// consumer.Config.Clock does.
	Clock shardqtype.Clock
}

// DefaultBackoff waits 2^(attempt-1) seconds, at most an hour, with ±10% jitter. The
// worker caps delays at the queue's MaxTimeout (19m50s with default settings, which
// DefaultBackoff exceeds from attempt 12).
func DefaultBackoff(attempt int) time.Duration { return workerloop.DefaultBackoff(attempt) }

// Stats counts what a worker did since it was made: tasks leased, started, succeeded,
// failed, panicked, retried, dead-lettered, acked; leases lost; locks contended; tasks
// given back at stop (Released) or dropped because their lease ran out before a handler
// was free (Expired); AcquireTasks calls (Polls); handlers running now.
type Stats = workerloop.Stats

// StopError is returned by Stop (and RunUntil) when its context ends before the worker
// has stopped. The handlers still running then have had their contexts cancelled; their
// tasks come back after their timeout. It matches the context's error with errors.Is.
type StopError = workerloop.StopError

// Worker runs a Handler on a queue's tasks.
type Worker struct {
	w *workerloop.Worker
}

// New returns a Worker for cfg.Queue, reading and writing through session.
func New(d *shardqtype.Driver, cfg Config) (*Worker, error) {
	w, err := workerloop.New(d, workerloop.Config{Queue: cfg.Queue, Handler: cfg.Handler,
		Concurrency: cfg.Concurrency, Prefetch: cfg.Prefetch, MaxIdleInterval: cfg.MaxIdleInterval,
		BatchDelay: cfg.BatchDelay, MaxAttempts: cfg.MaxAttempts, Backoff: cfg.Backoff,
		ExtendLeases: cfg.ExtendLeases, AckInterval: cfg.AckInterval, SignalInterval: cfg.SignalInterval,
		SeriesInterval: cfg.SeriesInterval, MaxClockSkew: cfg.MaxClockSkew, Observer: cfg.Observer,
		Logger: cfg.Logger, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	return &Worker{w: w}, nil
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats { return w.w.Stats() }

// Start begins leasing and handling tasks in the background, until Stop. Cancelling ctx
// stops the worker hard: handlers' contexts end and nothing more is acked. Start returns
// an error if the worker was started before, by Start or RunUntil.
func (w *Worker) Start(ctx context.Context) error { return w.w.Start(ctx) }

// Stop stops leasing tasks, gives back leased tasks no handler started, lets running
// handlers finish until ctx ends, and acks those that succeeded. When ctx ends first,
// Stop cancels the remaining handlers' contexts and returns at once a *StopError saying
// how many were still running: their tasks come back after their timeout, and what
// finished goes on being acked in the background (a later Stop waits for it). Stop
// returns an error if the worker was not started. It may be called more than once, and
// from several goroutines, also while Start runs; each call waits.
func (w *Worker) Stop(ctx context.Context) error { return w.w.Stop(ctx) }

// RunUntil works until shortly before deadline, for processes that a scheduler starts
// every so often. It stops leasing tasks when the average handling time so far, doubled,
// would overrun the deadline. A little before the deadline it cancels the handlers still
// running (they are not acked), leaving the rest for acks, and it returns by the
// deadline, by when every ack, retry and release has ended too. It returns a *StopError
// at the deadline when handlers that ignore their context were still running, or acks,
// retries and releases were still unanswered (a slow node): those go on in the
// background, and a task whose ack never lands comes back after its timeout. It returns
// an error if the worker was started before. No tasks are prefetched in this mode.
func (w *Worker) RunUntil(ctx context.Context, deadline time.Time) error {
	return w.w.RunUntil(ctx, deadline)
}
