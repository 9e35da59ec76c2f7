package shardq

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/slots"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/internal/wakewatch"
	"github.com/shardq/shardq/internal/workerloop"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// Defaults for Config and InsertOpts.
const (
	// DefaultQueue is the queue of a task whose insert names none.
	DefaultQueue       = "default"
	DefaultConcurrency = worker.DefaultConcurrency
	DefaultMaxAttempts = worker.DefaultMaxAttempts
)

// Queue is how a client works one queue.
type Queue struct {
	// Concurrency is how many of the queue's tasks run at once in this client.
	// Defaults to DefaultConcurrency.
	Concurrency int
	// Weight orders the queue among the client's others when Config.Concurrency makes
	// them share handlers: its share of freed handlers (QueueWeighted), or its rank, the
	// highest first (QueueStrict). Defaults to 1.
	Weight int
}

// QueueOrder is how queues that share a client's handlers (Config.Concurrency) take turns.
type QueueOrder int

const (
	// QueueWeighted gives each queue with tasks due a share of the handlers that free up,
	// in proportion to its Weight: every queue with tasks due makes progress.
	QueueWeighted QueueOrder = iota
	// QueueStrict gives the handlers that free up to the queue of the highest Weight with
	// tasks due: a queue waits for as long as one above it has tasks due.
	QueueStrict
)

// Config configures a Client.
type Config struct {
	// Queues are the queues this client takes tasks from, by name. A queue that does not
	// exist yet is created with the default settings (QueueConfig) when the client starts;
	// create it with CreateQueue first for others. Defaults to none: an insert-only client.
	Queues map[string]Queue
	// Workers run the tasks of each kind. Required when Queues names a queue.
	Workers *Workers
	// Concurrency, when set, bounds the handlers running at once across all the client's
	// queues, which QueueOrder shares among them; its queues then lease no task ahead of a
	// free handler. Defaults to 0: each queue is bound by its own Concurrency alone, leases
	// ahead of its handlers as worker.Config.Prefetch says, and waits for no other.
	Concurrency int
	// QueueOrder is how queues take turns at the handlers Concurrency bounds.
	// Defaults to QueueWeighted.
	QueueOrder QueueOrder
	// MaxAttempts is how many attempts a task gets before it is dead-lettered, unless its
	// insert says otherwise. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Backoff gives the delay before the next attempt after a failure on attempt n.
	// Defaults to worker.DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Observer receives every event of the client's consumers and workers.
	// Defaults to NopObserver.
	Observer Observer
	// Logger receives errors and debug events. Defaults to a logger that discards.
	Logger *slog.Logger
	// Clock tells the time for due times and leases. Defaults to the cluster's time: this
	// host's clock corrected by its measured offset from the coordinators'.
	Clock Clock
}

// Client inserts tasks of typed kinds, and runs the workers of each kind on the queues it
// is configured with. One per process and keyspace is the intent; it is safe for
// concurrent use.
type Client struct {
	cfg      Config
	driver   *shardqtype.Driver
	producer *producer.Producer

	mu        sync.Mutex
	started   bool
	workers   map[string]*workerloop.Worker // by queue, once started
	stopWatch context.CancelFunc            // ends the watch of the queues' signals
	watched   chan struct{}                 // closed when the watch has ended
}

// NewClient returns a Client reading and writing through session, whose keyspace holds
// shardq's tables (ApplySchema).
func NewClient(d *shardqtype.Driver, cfg Config) (*Client, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	if len(cfg.Queues) > 0 && cfg.Workers == nil {
		return nil, defaults.Invalid("Config.Workers", "is nil, and Config.Queues names queues to work")
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Queues)) {
		if !shard.ValidQueueName(name) {
			return nil, defaults.Invalid("Config.Queues", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", name)
		}
		if cfg.Queues[name].Concurrency < 0 {
			return nil, defaults.Invalid(fmt.Sprintf("Config.Queues[%q].Concurrency", name), "%d is negative", cfg.Queues[name].Concurrency)
		}
		if cfg.Queues[name].Weight < 0 {
			return nil, defaults.Invalid(fmt.Sprintf("Config.Queues[%q].Weight", name), "%d is negative", cfg.Queues[name].Weight)
		}
	}
	if cfg.Concurrency < 0 {
		return nil, defaults.Invalid("Config.Concurrency", "%d is negative", cfg.Concurrency)
	}
	if cfg.QueueOrder != QueueWeighted && cfg.QueueOrder != QueueStrict {
		return nil, defaults.Invalid("Config.QueueOrder", "%d is neither QueueWeighted nor QueueStrict", cfg.QueueOrder)
	}
	if err := defaults.NonNegative(&cfg.MaxAttempts, worker.DefaultMaxAttempts, "Config.MaxAttempts"); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := producer.New(d, producer.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, driver: d, producer: p}, nil
}

// Start creates the queues the client works that do not exist yet, and begins taking
// and running their tasks in the background, until Stop. Cancelling ctx stops the client
// hard, as StopAndCancel does. Starting an insert-only client does nothing; starting a
// client twice is an error.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("shardq: client already started")
	}
	names := slices.Sorted(maps.Keys(c.cfg.Queues))
	for _, name := range names {
		if _, err := LoadQueue(ctx, c.driver, name); errors.Is(err, ErrQueueNotFound) {
			_, err = CreateQueue(ctx, c.driver, QueueConfig{Name: name})
			if err != nil {
				return fmt.Errorf("shardq: creating queue %q: %w", name, err)
			}
		} else if err != nil {
			return err
		}
	}
	var pool *slots.Pool
	if c.cfg.Concurrency > 0 {
		queues := make(map[string]slots.Queue, len(names))
		for _, name := range names {
			q := c.cfg.Queues[name]
			queues[name] = slots.Queue{Weight: q.Weight, Cap: cmp.Or(q.Concurrency, DefaultConcurrency)}
		}
		pool = slots.New(c.cfg.Concurrency, map[QueueOrder]slots.Order{QueueWeighted: slots.Weighted, QueueStrict: slots.Strict}[c.cfg.QueueOrder], queues)
	}
	workers := make(map[string]*workerloop.Worker, len(names))
	for _, name := range names {
		w, err := workerloop.New(c.driver, workerloop.Config{Queue: name, Handler: worker.HandlerFunc(c.run),
			Concurrency: c.cfg.Queues[name].Concurrency, MaxAttempts: c.cfg.MaxAttempts, Backoff: c.cfg.Backoff,
			Observer: c.cfg.Observer, Logger: c.cfg.Logger, Clock: c.cfg.Clock, Pool: pool, SharedSignals: true})
		if err != nil {
			return err
		}
		workers[name] = w
	}
	for i, name := range names {
		if err := workers[name].Start(ctx); err != nil {
			for _, started := range names[:i] {
				_ = workers[started].Stop(ctx)
			}
			return err
		}
	}
	c.started, c.workers = true, workers
	if len(names) > 0 {
		st := sessionstate.For(c.driver, c.cfg.Logger)
		watchCtx, stop := context.WithCancel(ctx)
		c.stopWatch, c.watched = stop, make(chan struct{})
		var clock Clock = st.Cluster
		if c.cfg.Clock != nil {
			clock = c.cfg.Clock
		}
		watch := wakewatch.New(st, wakewatch.Config{Queues: names, Interval: worker.DefaultSignalInterval,
			Ahead: worker.DefaultMaxIdleInterval, LookAhead: workerloop.LookAhead(worker.DefaultMaxIdleInterval), MaxClockSkew: consumer.DefaultMaxClockSkew,
			Clock: clock, Logger: c.cfg.Logger})
		go func() {
			defer close(c.watched)
			watch.Run(watchCtx)
		}()
	}
	return nil
}

// run runs one delivery with the worker of its kind.
func (c *Client) run(ctx context.Context, t *consumer.Task) error {
	work, ok := c.cfg.Workers.kinds[t.Kind]
	if !ok {
		return &UnknownKindError{Kind: t.Kind}
	}
	return work(ctx, t, taskmeta.MaxAttemptsOr(t.Headers, c.cfg.MaxAttempts))
}

// Stop stops taking tasks, gives back those taken but not started, lets running workers
// finish until ctx ends, and acks those that succeeded. When ctx ends first, the
// remaining workers' contexts are cancelled and Stop returns a *worker.StopError per
// queue still running (joined): their tasks come back after their timeout. Stop may be
// called more than once and from several goroutines; each call waits. Stopping a client
// that was not started does nothing.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	workers, stopWatch, watched := c.workers, c.stopWatch, c.watched
	c.mu.Unlock()
	if stopWatch != nil {
		stopWatch()
		<-watched
	}
	errs := make([]error, 0, len(workers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := w.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopAndCancel stops the client as Stop does, but cancels the contexts of running
// workers at once instead of letting them finish: what they finished before is acked,
// and their own tasks come back after their timeout. It waits until ctx ends for the acks.
func (c *Client) StopAndCancel(ctx context.Context) error {
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_ = c.Stop(cancelled) // reports the workers it cancelled; the wait below is what counts
	return c.Stop(ctx)
}

// InsertOpts are the options of one insert. A zero field takes the kind's value
// (ArgsWithInsertOpts), and then the default.
type InsertOpts struct {
	// Queue names the queue. Defaults to DefaultQueue.
	Queue string
	// DueAt is when the task may run. Defaults to now.
	DueAt time.Time
	// Priority in [MinPriority, MaxPriority]: higher runs first among due tasks.
	// Defaults to MinPriority.
	Priority int
	// Timeout is how long each attempt has before the task is delivered again.
	// Defaults to the queue's DefaultTimeout.
	Timeout time.Duration
	// MaxAttempts is how many attempts the task gets before it is dead-lettered.
	// Defaults to the working client's Config.MaxAttempts.
	MaxAttempts int
	// UniqueKey makes the task unique in its queue while it is pending, in flight or
	// retrying: an insert with the same key fails with a *producer.DuplicateError.
	// Defaults to none.
	UniqueKey string
	// Headers are kept with the task and handed to its worker (Task.Headers); keys that
	// start with "shardq-" are the library's. Defaults to none.
	Headers map[string]string
}

// InsertResult is what an insert wrote.
type InsertResult struct {
	ID    uuid.UUID
	Kind  string
	Queue string
	// DueAt is the due time asked for; zero for now.
	DueAt    time.Time
	Priority int
}

// InsertManyParams is one task of InsertMany.
type InsertManyParams struct {
	Args Args
	// Opts may be nil: the kind's options, then the defaults.
	Opts *InsertOpts
}

// Insert writes a task of args' kind, its args encoded as JSON. Bad args or options are a
// *ValidationError naming the field, and nothing is written.
func (c *Client) Insert(ctx context.Context, args Args, opts *InsertOpts) (InsertResult, error) {
	res, err := c.InsertMany(ctx, []InsertManyParams{{Args: args, Opts: opts}})
	if err != nil {
		var perr *producer.PartialError
		if errors.As(err, &perr) {
			return InsertResult{}, perr.Err
		}
		return InsertResult{}, err
	}
	return res[0], nil
}

// InsertMany writes tasks as Insert does, one batch per partition. Every task is checked
// first: if any is invalid, nothing is written and the error names it. If some writes
// fail, the error is a *producer.PartialError naming them; the others were written, and
// their results are returned with it.
func (c *Client) InsertMany(ctx context.Context, params []InsertManyParams) ([]InsertResult, error) {
	tasks := make([]producer.Task, len(params))
	res := make([]InsertResult, len(params))
	for i, p := range params {
		t, r, err := task(p, fmt.Sprintf("params[%d]", i))
		if err != nil {
			return nil, err
		}
		tasks[i], res[i] = t, r
	}
	ids, err := c.producer.ScheduleTasks(ctx, tasks)
	for i := range ids {
		res[i].ID = ids[i]
	}
	if err != nil {
		var perr *producer.PartialError
		if errors.As(err, &perr) {
			return res, err
		}
		return nil, err
	}
	return res, nil
}

// task is the producer's task for p, and what its insert writes; field names p in errors.
func task(p InsertManyParams, field string) (producer.Task, InsertResult, error) {
	if p.Args == nil {
		return producer.Task{}, InsertResult{}, defaults.Invalid(field+".Args", "is nil")
	}
	kind := p.Args.Kind()
	if kind == "" {
		return producer.Task{}, InsertResult{}, defaults.Invalid(field+".Args", "%T has an empty Kind", p.Args)
	}
	var opts InsertOpts
	if a, ok := p.Args.(ArgsWithInsertOpts); ok {
		opts = a.InsertOpts()
	}
	if p.Opts != nil {
		opts = merge(opts, *p.Opts)
	}
	if opts.Queue == "" {
		opts.Queue = DefaultQueue
	}
	if opts.MaxAttempts < 0 {
		return producer.Task{}, InsertResult{}, defaults.Invalid(field+".Opts.MaxAttempts", "%d is negative", opts.MaxAttempts)
	}
	var headers map[string]string
	for k, v := range opts.Headers {
		if strings.HasPrefix(k, taskmeta.Prefix) {
			return producer.Task{}, InsertResult{}, defaults.Invalid(field+".Opts.Headers", "%q starts with %q, which is the library's", k, taskmeta.Prefix)
		}
		if headers == nil {
			headers = make(map[string]string, len(opts.Headers)+1)
		}
		headers[k] = v
	}
	if opts.MaxAttempts > 0 {
		headers = taskmeta.WithInt(headers, taskmeta.MaxAttempts, opts.MaxAttempts)
	}
	payload, err := json.Marshal(p.Args)
	if err != nil {
		return producer.Task{}, InsertResult{}, &ValidationError{Field: field + ".Args", Reason: "cannot be encoded as JSON", Err: err}
	}
	return producer.Task{Queue: opts.Queue, Payload: payload, DueAt: opts.DueAt, Priority: opts.Priority,
			Timeout: opts.Timeout, Key: opts.UniqueKey, Headers: headers, Kind: kind},
		InsertResult{Kind: kind, Queue: opts.Queue, DueAt: opts.DueAt, Priority: opts.Priority}, nil
}

// merge returns base with every field that over sets replaced by over's.
func merge(base, over InsertOpts) InsertOpts {
	if over.Queue != "" {
		base.Queue = over.Queue
	}
	if !over.DueAt.IsZero() {
		base.DueAt = over.DueAt
	}
	if over.Priority != 0 {
		base.Priority = over.Priority
	}
	if over.Timeout != 0 {
		base.Timeout = over.Timeout
	}
	if over.MaxAttempts != 0 {
		base.MaxAttempts = over.MaxAttempts
	}
	if over.UniqueKey != "" {
		base.UniqueKey = over.UniqueKey
	}
	if over.Headers != nil {
		base.Headers = over.Headers
	}
	return base
}
