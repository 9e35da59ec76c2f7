// Package consumer takes due tasks from a queue and acks them.
//
// AcquireTasks visits the queue's partitions shard by shard. For each partition with due
// rows it takes the shard's lock (package lock), reads up to n due rows above the
// partition's read floor, writes a timeout marker per task into the partition of the
// task's lease deadline, and then, in one conditional batch on the read partition,
// deletes the rows read and releases the lock. That batch applies only while the lock is
// still held, so a consumer that stalled past its lock's TTL changes nothing (its markers
// are deleted again). AckTasks deletes markers with conditional deletes: a marker that
// expired and was delivered again is gone, and its ack fails with ErrLeaseLost.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardq/shardq/internal/random"
	"github.com/shardq/shardq/shardqtype"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/combine"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// Defaults and limits for Config and calls.
const (
	DefaultMaxClockSkew       = 2 * time.Second
	DefaultPartitionsInFlight = 16
	DefaultLookAhead          = 5 * time.Second
	// MaxAcquire is the most tasks one AcquireTasks call may ask for.
	MaxAcquire = 1000
	// SweepInterval is how often AcquireTasks looks for rows written later than
	// MaxClockSkew: such a row is delivered at most about this long (plus the caller's
	// poll interval) after its write, instead of when the ring comes back to it.
	SweepInterval = scanplan.SweepInterval
	// MaxTakeBytes bounds the payload and header bytes one locked read takes from a
	// partition; the rest wait for the next call. Markers are written in batches of at
	// most taskrow.MaxBatchBytes, so no write comes near Cassandra's mutation limit.
	MaxTakeBytes = 4 << 20
)

var (
	// ErrLeaseLost means a task's lease expired and the task was delivered again, or it
	// was acked already: this ack changed nothing.
	ErrLeaseLost = errors.New("consumer: lease lost")
	// ErrOutcomeUnknown means a write failed and reading back could not settle it. Tasks
	// it concerns come back after their timeout if they were not acked; none is lost.
	// It is lwt.ErrOutcomeUnknown, which the lock's unknown outcomes match too.
	ErrOutcomeUnknown = lwt.ErrOutcomeUnknown
)

// Config configures a Consumer.
type Config struct {
	// Queue names the queue to consume, made with shardq.CreateQueue. Required.
	Queue string
	// MaxClockSkew bounds how far producers' clocks plus write latency may trail the
	// consumer's clock: reads never skip rows whose ID time is within this of the time
	// the partition was last read. A row written later than that waits until the ring
	// comes back to its partition. Defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// PartitionsInFlight is how many partitions AcquireTasks and AckTasks read or write
	// at once. Defaults to DefaultPartitionsInFlight.
	PartitionsInFlight int
	// LookAhead is how far past now AcquireTasks looks for tasks coming due when it finds
	// too few due, to report the earliest in NextDue. A consumer that keeps finding
	// nothing reads every partition once per half LookAhead, and in between only those
	// it knows something is coming due in or was written to. Defaults to DefaultLookAhead.
	LookAhead time.Duration
	// Observer receives BatchAcquired, LockContended, Acked, LeaseLost and
	// PartitionFailed events. Defaults to shardqtype.NopObserver.
	Observer shardqtype.Observer
	// Clock decides when tasks are due and leases expire, and stamps writes (never past
	// the cluster's time). Defaults to the cluster's time: this host's clock corrected by
	// its measured offset from the coordinators', so a host whose clock leads never
	// delivers early. A Clock given here is trusted; a skew of more than half
	// MaxClockSkew from the cluster's time is reported (shardqtype.ClockSkewed).
	Clock shardqtype.Clock
	// Logger receives debug and warning events. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Task is a delivered task. Ack it before Deadline, or it is delivered again.
type Task struct {
	ID       uuid.UUID
	Queue    string
	Payload  []byte
	DueAt    time.Time
	Priority int
	// Attempt counts deliveries: 1 on the first. Deliveries its handlers snoozed
	// (Snooze) do not count.
	Attempt int
	// Deadline is when the lease ends and the task becomes due again.
	Deadline time.Time
	// Timeout is the task's lease term: how long each delivery has before it is due again.
	Timeout time.Duration
	// Token is the fencing token of this delivery: it grows with every delivery of the
	// task, across retries and replays. Pass it to downstream systems so they can reject
	// writes from a holder whose lease has passed to another.
	Token int64
	// Series names the recurring series (package series) the task is an occurrence of;
	// empty for other tasks. DueAt is then the occurrence's time in the series.
	Series string
	// Headers are the headers the task was scheduled with (producer.Task.Headers); nil
	// when it has none. Changing them changes nothing stored.
	Headers map[string]string
	// Kind is the kind the task was scheduled with (producer.Task.Kind); empty when it
	// has none.
	Kind string

	marker taskrow.Row // the timeout marker Ack deletes
	source uuid.UUID   // the ID of the row it was taken from, whose time is its place in line
	steps  int64       // index writes this delivery made after the swap (taskindex.Stamp)
}

// Consumer takes and acks tasks of one queue. It is safe for concurrent use.
type Consumer struct {
	// shared is what the consumers of a queue's later layouts (rings) share with c; each
	// has a layout and a plan of its own.
	shared
	layout shard.Layout

	mu   sync.Mutex     // guards plan, rings, and q, layout and locker while init sets them
	plan *scanplan.Plan // what to read next and from where; nil before init
	// rings reads the rings of the queue's later layouts (generations after the first,
	// which is c's own), each a Consumer of its own layout sharing c's lock, store and
	// settings, while they may hold rows (see internal/layouts).
	rings map[int]*Consumer
	// live are the consumers of the rings the last call read: NextDue is theirs alone.
	// c's own plan, once its layout is drained, keeps what its last call saw for good.
	live  []*Consumer
	turn  atomic.Uint64 // calls of AcquireTasks, which pick the ring read first
	drain drainer
	// maintained is when Maintain was last called (host time, Unix ns): AcquireTasks
	// leaves draining to Maintain's caller while it keeps calling.
	maintained atomic.Int64
	// woken is the wake-ups of the queue this process's producers had (wakeup.Bus.Woken)
	// at the last call: a change drops the plan's peek records, as a producer's touch
	// gathered with others (signal.Coalesce) may not show yet.
	woken atomic.Uint64
	// created is when the queue was created, for c of its first layout (see creation);
	// passedOnce starts the plan's pass marks on the first call.
	created    time.Time
	passedOnce sync.Once
}

type shared struct {
	cfg     Config
	log     *slog.Logger
	state   *sessionstate.State
	cluster *clustertime.Clock

	q       shardqtype.QueueConfig
	locker  *locking.Locker
	signals *signal.Toucher
	series  *series.Env
	leasing store.Leasing
	// moves writes the index entries of takes: those of takes running at once go in one
	// request (split by the store into batches of its partitions), not one each.
	moves *combine.Writer[taskindex.Write]

	beforeSwap func()            // tests only: runs between the locked read and the swap
	afterSwap  func(error) error // tests only: what the swap's LWT returned, and what to make of it
	afterAck   func(error) error // tests only: what an ack batch's LWT returned, and what to make of it
	failRead   func(key string) error
	failLookup func(id uuid.UUID) error // fails notEnded's index reads (tests)
	crash      func(step string) bool   // tests only: true stops at step as if the process died
}

// New returns a Consumer of cfg.Queue. The queue's settings are read on first use.
func New(d *shardqtype.Driver, cfg Config) (*Consumer, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	if !shard.ValidQueueName(cfg.Queue) {
		return nil, defaults.Invalid("Config.Queue", "%q is not a valid queue name", cfg.Queue)
	}
	for _, err := range []error{
		defaults.NonNegative(&cfg.MaxClockSkew, DefaultMaxClockSkew, "Config.MaxClockSkew"),
		defaults.NonNegative(&cfg.PartitionsInFlight, DefaultPartitionsInFlight, "Config.PartitionsInFlight"),
		defaults.NonNegative(&cfg.LookAhead, DefaultLookAhead, "Config.LookAhead"),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st := sessionstate.For(d, cfg.Logger)
	cluster := st.ClusterFor(cfg.Clock)
	if cfg.Clock == nil {
		cfg.Clock = cluster
	}
	if cfg.Observer == nil {
		cfg.Observer = shardqtype.NopObserver{}
	}
	signals := st.Signals
	index := st.Store.Index()
	moves := combine.New(func(ctx context.Context, ws []taskindex.Write) error {
		_, err := index.Write(ctx, ws, cfg.PartitionsInFlight)
		return err
	}, 2*MaxAcquire, math.MaxInt)
	return &Consumer{shared: shared{cfg: cfg, log: cfg.Logger, state: st, cluster: cluster, signals: signals, leasing: st.Store.Leasing(), moves: moves,
		series: &series.Env{Store: st.Store.Series(), Tasks: st.Store.Tasks(), Clock: cfg.Clock, Cluster: cluster, Log: cfg.Logger, Signals: signals, Bus: st.Bus, Layout: st.Fixed}}}, nil
}

// init loads the queue's settings once; a failure is retried on the next call.
func (c *Consumer) init(ctx context.Context) error {
	c.mu.Lock()
	done := c.locker != nil
	c.mu.Unlock()
	if done {
		return nil
	}
	// Read without the lock, which callers of Queue and NextDue take: two first calls
	// both read the settings (the session caches them) rather than one wait on the other.
	q, err := c.state.Queue(ctx, c.cfg.Queue)
	if err != nil {
		return err
	}
	// Nothing is taken by an unmeasured clock: until a measure succeeds, every call
	// fails here (shardqtype.ErrClockUnmeasured) and init runs again on the next.
	if err := c.cluster.Ready(ctx); err != nil {
		return err
	}
	created, err := c.creation(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locker != nil {
		return nil
	}
	locker, err := locking.New(c.state.Store.Locks(), locking.Config{TTL: q.LockTTL, Logger: c.log})
	if err != nil {
		return err
	}
	c.q, c.layout, c.locker = q, q.Layout(), locker
	c.plan, c.created = c.newPlan(c.layout), created
	return nil
}

// creation returns when the queue was created, by its creator's node, or zero when that
// is not stored or the consumer's Clock is not within MaxClockSkew of the cluster's time
// (as a test's may be): the nodes' clocks then say nothing of where its rows lie.
func (c *Consumer) creation(ctx context.Context) (time.Time, error) {
	at, err := c.state.CreatedAt(ctx, c.cfg.Queue)
	if err != nil {
		return time.Time{}, err
	}
	if off := c.cfg.Clock.Now().Sub(c.cluster.Now()); off > c.cfg.MaxClockSkew || off < -c.cfg.MaxClockSkew {
		return time.Time{}, nil
	}
	return at, nil
}

// createdBelow returns a bucket of c's layout that no row lies below, judged at now, when
// c is of the queue's first layout and the queue was created less than
// scanplan.MarkLife before now: every row's time is no earlier than its writer's clock
// once the queue existed, which trails the time its creator's node stamped by at most
// twice MaxClockSkew, and a row written later than that shows in the signal cells a new
// plan reads, as it would for a stored mark. One bucket more is spared for a row stamped
// at a bucket's edge. math.MinInt64 otherwise.
func (c *Consumer) createdBelow(now time.Time) int64 {
	if c.created.IsZero() || now.Sub(c.created) >= scanplan.MarkLife(c.layout) {
		return math.MinInt64
	}
	return c.layout.Bucket(c.created.Add(-2*c.cfg.MaxClockSkew)) - 1
}

// startPassed starts c's plan from its ring's stored pass mark, and for the queue's
// first layout from its creation, once, on c's first call: the plan reads every
// partition of its lap when the mark cannot be read.
func (c *Consumer) startPassed(ctx context.Context, now time.Time) {
	c.passedOnce.Do(func() {
		mark, at, err := c.state.Store.Signals().Passed(ctx, c.layout.Ring())
		if err != nil {
			c.log.WarnContext(ctx, "reading the pass mark; reading every partition of the lap", "queue", c.q.Name, "error", err)
			mark = nil
		}
		c.plan.StartPassed(mark, at, c.createdBelow(now), now)
	})
}

// storeMark stores the pass mark the plan made at now, for consumers starting afresh
// (scanplan.Plan.StartPassed). A failure is logged, and tried again half a lap later,
// not on every call (a keyspace whose schema lacks the table fails every time).
func (c *Consumer) storeMark(ctx context.Context, mark map[int]int64, now time.Time) {
	if err := c.state.Store.Signals().Pass(ctx, c.layout.Ring(), mark, now); err != nil {
		c.log.WarnContext(ctx, "storing the pass mark", "queue", c.q.Name, "error", err)
		mark = nil
	}
	c.plan.Marked(mark, now)
}

// newPlan returns a plan of reads of the ring of layout.
func (c *Consumer) newPlan(layout shard.Layout) *scanplan.Plan {
	// Start consumers at different shards so that N consumers on S shards rarely collide.
	return scanplan.New(scanplan.Config{Layout: layout, Skew: c.cfg.MaxClockSkew, LookAhead: c.cfg.LookAhead,
		MaxTakeBytes: MaxTakeBytes, MaxPageRows: MaxAcquire,
		SlotStart: func(b int64, slot int) time.Time { return signal.SlotStart(layout, b, slot) },
	}, c.cfg.Clock.Now(), random.N(layout.ShardCount))
}

// ringsOf returns the consumers of the rings of h's live layouts, oldest first: c for the
// first layout, one made on first use for each later one. Those of drained layouts go.
func (c *Consumer) ringsOf(h layouts.History) []*Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Consumer
	for _, l := range h.Live() {
		if l.Generation == 0 {
			out = append(out, c)
			continue
		}
		r, ok := c.rings[l.Generation]
		if !ok {
			r = &Consumer{shared: c.shared, layout: l, plan: c.newPlan(l)}
			if c.rings == nil {
				c.rings = map[int]*Consumer{}
			}
			c.rings[l.Generation] = r
		}
		out = append(out, r)
	}
	for g := range c.rings {
		if g < h.Drained {
			delete(c.rings, g)
		}
	}
	c.live = out
	return out
}

// AcquireTasks returns up to n due tasks, leased to this consumer until their deadline,
// highest priority first, then earliest due (a task scheduled with a due time in the
// past is due from when it was scheduled). It never returns a task before its due time,
// and skips shards whose lock another consumer holds rather than waiting. Ordering holds
// within a concurrency shard; across shards it is best effort.
//
// A partition that cannot be read or written does not stop the others: its error goes
// to the Observer (PartitionFailed) and the log, and the call returns what it could take.
// It returns an error only when no partition could be read at all.
//
// While the queue is paused (shardq.PauseQueue, as read at most shardqtype.SettingsRefresh
// ago) it takes nothing and returns shardqtype.ErrQueuePaused.
func (c *Consumer) AcquireTasks(ctx context.Context, n int) ([]*Task, error) {
	if n < 1 || n > MaxAcquire {
		return nil, defaults.Invalid("n", "%d is not in [1, %d]", n, MaxAcquire)
	}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	switch paused, err := c.state.Paused(ctx, c.cfg.Queue); {
	case err != nil:
		return nil, err
	case paused:
		return nil, shardqtype.ErrQueuePaused
	}
	// The same read as Paused's: markers written by this call are placed by a history
	// at most shardqtype.SettingsRefresh old.
	h, err := c.state.Layouts(ctx, c.cfg.Queue)
	if err != nil {
		return nil, err
	}
	var out []*Task
	var readErr error
	// Each call starts at the next ring, so a backlog in one does not hold back what
	// comes due in another.
	rings := c.ringsOf(h)
	first := int(c.turn.Add(1) % uint64(len(rings)))
	for _, r := range slices.Concat(rings[first:], rings[:first]) {
		got, err := r.acquire(ctx, n-len(out))
		out = append(out, got...)
		if err != nil {
			readErr = err
		}
		if len(out) == n {
			break
		}
	}
	if time.Since(time.Unix(0, c.maintained.Load())) > maintainedFor {
		if err := c.drain.maybe(ctx, c, h); err != nil {
			c.log.WarnContext(ctx, "looking whether an old layout is drained", "queue", c.q.Name, "generation", h.Drained, "error", err)
		}
	}
	if len(out) == 0 && readErr != nil {
		return nil, readErr
	}
	slices.SortStableFunc(out, func(a, b *Task) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return shard.IDTime(a.source).Compare(shard.IDTime(b.source))
	})
	return out, nil
}

// Maintain does the upkeep of c's queue that takes no task: about every 30 s while a
// layout change (shardq.ChangeLayout) is under way, it reads the oldest live layout's
// partitions and, once they hold no task, marks that layout drained, so that consumers
// read it no more. A look that finds tasks left waits twice as long for the next, up to
// 16 minutes. Calls in between read nothing but the queue's settings, cached for
// shardqtype.SettingsRefresh.
//
// AcquireTasks makes those looks itself unless Maintain was called within the last
// minute: a caller that calls Maintain in a loop of its own (every few seconds; workers
// and clients do) keeps those reads out of its takes, and if its loop stops, the takes
// look again.
func (c *Consumer) Maintain(ctx context.Context) error {
	c.maintained.Store(time.Now().UnixNano())
	if err := c.init(ctx); err != nil {
		return err
	}
	h, err := c.state.Layouts(ctx, c.cfg.Queue)
	if err != nil {
		return err
	}
	if err := c.drain.maybe(ctx, c, h); err != nil {
		return fmt.Errorf("consumer: looking whether layout %d of queue %s is drained: %w", h.Drained, c.q.Name, err)
	}
	return nil
}

// acquire is AcquireTasks on the ring of c's layout: it returns up to n tasks, unsorted,
// and the error of a call that could read no partition.
func (c *Consumer) acquire(ctx context.Context, n int) ([]*Task, error) {
	now := c.cfg.Clock.Now()
	c.startPassed(ctx, now)
	c.sweep(ctx, now)
	parts := c.plan.Candidates(now)
	idle := c.plan.Begin()
	if w := c.state.Bus.Woken(c.q.Name); c.woken.Swap(w) != w {
		c.plan.ForgetAll()
	}
	// Partitions whose last take was full are assumed to hold more: when they can fill
	// the call, they are tried first without reading the others. Otherwise, or when they
	// fall short, every candidate is peeked at once, so an idle queue costs one round of
	// parallel reads, not one read after another.
	assumed := 0
	for _, pt := range parts {
		assumed += pt.Avail
	}
	var out []*Task
	if assumed >= n {
		out = c.takeAll(ctx, parts, n, now)
	}
	var readErr error
	if len(out) < n {
		for i := range parts {
			parts[i].Avail = 0
		}
		var look func()
		look, readErr = c.peekAll(ctx, parts, n-len(out), now, idle)
		// A look-ahead only finds NextDue, for a call that falls short: it runs beside
		// the takes rather than before them, and the takes work on a copy of the parts
		// it sets.
		taking := slices.Clone(parts)
		var looking sync.WaitGroup
		if look != nil {
			looking.Go(look)
		}
		got := c.takeAll(ctx, taking, n-len(out), now)
		looking.Wait()
		c.plan.Advance(parts, now)
		if mark, ok := c.plan.MarkDue(now); ok {
			c.storeMark(ctx, mark, now)
		}
		out = append(out, got...)
	}
	// A call that took tasks, however few, has the next read due rows only: under a steady
	// stream, reading ahead on every call would cost more than the tasks it takes.
	c.plan.End(len(out) == 0)
	if len(out) == 0 && readErr != nil {
		return nil, readErr
	}
	return out, nil
}

// Queue returns the settings of the consumer's queue, loading them on first use.
func (c *Consumer) Queue(ctx context.Context) (shardqtype.QueueConfig, error) {
	if err := c.init(ctx); err != nil {
		return shardqtype.QueueConfig{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q, nil
}

// NextDue returns the earliest time at which the last AcquireTasks saw a row become
// visible (a task coming due or a lease expiring) within LookAhead, or shortly after it
// when it skipped due rows (another consumer held their shard), or the time of the call
// when it saw a partition holding more due rows than it looked at, or zero if it saw
// none. Tasks scheduled since then are not counted.
func (c *Consumer) NextDue() time.Time {
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	var next time.Time
	for _, r := range live {
		if at := r.plan.NextDue(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// observeFailure reports one partition's failure and goes on.
func (c *Consumer) observeFailure(ctx context.Context, key, op string, err error) {
	c.log.WarnContext(ctx, "partition failed; going on with the others", "queue", c.q.Name, "partition_key", key, "op", op, "error", err)
	c.cfg.Observer.Observe(ctx, shardqtype.PartitionFailed{Queue: c.q.Name, PartitionKey: key, Op: op, Err: err})
}

func wrapErr(what, key string, err error) error {
	return fmt.Errorf("consumer: %s %s: %w", what, key, err)
}

// touch touches the wake-up signal cells of markers just written, so idle workers
// elsewhere know what comes due when. It outlives ctx, whose end may be what failed the
// write. A failure is logged; the session's toucher retries it (signal.Toucher).
func (c *Consumer) touch(ctx context.Context, rows []taskrow.Row) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signal.TouchTimeout)
	defer cancel()
	var touches signal.Touches
	for _, r := range rows {
		touches.Add(c.state.LayoutOf(c.q, r.Key), r.ID, r.TaskID)
	}
	if err := c.signals.Touch(ctx, &touches); err != nil {
		c.log.WarnContext(ctx, "touching wake-up signals", "queue", c.q.Name, "error", err)
	}
}

// ownCells reads which signal cells of the buckets of parts were touched, or nil when
// they cannot be read: for a scan after a call that took tasks, which counts a partition
// whose cell shows no new touch as holding nothing new, so a read a client's watch shared
// up to sessionstate.SharedAge ago would hide what came since, until the watch's next
// read woke the worker (a stream's tasks waited up to a whole SignalInterval).
func (c *Consumer) ownCells(ctx context.Context, parts []scanplan.Part) scanplan.Cells {
	if len(parts) == 0 {
		return nil
	}
	from, to := bucketsOf(parts)
	return c.readCells(ctx, from, to)
}

// sharedCells is ownCells served, when it can be, by a read of them that a client's watch
// shared within sessionstate.SharedAge: for what only finds NextDue, the watch waking
// the worker for what is new.
func (c *Consumer) sharedCells(ctx context.Context, parts []scanplan.Part) scanplan.Cells {
	if len(parts) == 0 {
		return nil
	}
	from, to := bucketsOf(parts)
	if cells, _, ok := c.state.SharedCells(c.layout.Ring(), from, to); ok {
		return planCells(nil, cells)
	}
	return c.readCells(ctx, from, to)
}

// idleCells is sharedCells for an idle scan of parts at now, with the cells of the
// buckets a lap before that the plan asks for (scanplan.Plan.Lookback), whether those
// were read, and when the cells were read by the consumer's clock (at now, or earlier for
// a shared read). Without shared reads, one read covers both.
func (c *Consumer) idleCells(ctx context.Context, parts []scanplan.Part, now time.Time) (scanplan.Cells, bool, time.Time) {
	if len(parts) == 0 {
		return nil, false, now
	}
	from, to := bucketsOf(parts)
	backFrom, backTo, back := c.plan.Lookback(parts, now)
	shared, age, ok := c.state.SharedCells(c.layout.Ring(), from, to)
	if !ok {
		if back {
			from = min(from, backFrom)
		}
		cells := c.readCells(ctx, from, to)
		return cells, back && cells != nil, now
	}
	cells, at := planCells(nil, shared), now.Add(-age)
	if !back {
		return cells, false, at
	}
	if before, ok := c.state.SharedLookback(c.layout.Ring(), backFrom, backTo); ok {
		return planCells(cells, before), true, at
	}
	before := c.readCells(ctx, backFrom, backTo)
	if before == nil {
		return cells, false, at
	}
	maps.Copy(cells, before)
	return cells, true, at
}

// bucketsOf returns the first and last of parts' buckets.
func bucketsOf(parts []scanplan.Part) (from, to int64) {
	from, to = parts[0].Bucket, parts[0].Bucket
	for _, pt := range parts {
		from, to = min(from, pt.Bucket), max(to, pt.Bucket)
	}
	return from, to
}

// readCells reads the signal cells of buckets from..to, or returns nil when they cannot
// be read.
func (c *Consumer) readCells(ctx context.Context, from, to int64) scanplan.Cells {
	cells, err := c.state.Store.Signals().Cells(ctx, c.layout.Ring(), from, to)
	if err != nil {
		c.log.WarnContext(ctx, "reading wake-up signals; reading every partition", "queue", c.q.Name, "error", err)
		return nil
	}
	return planCells(nil, cells)
}

// planCells adds cells to into (made when nil) as the plan names them, and returns it.
func planCells(into scanplan.Cells, cells map[signal.Cell]uuid.UUID) scanplan.Cells {
	if into == nil {
		into = make(scanplan.Cells, len(cells))
	}
	for cell, v := range cells {
		into[scanplan.Cell{Bucket: cell.Bucket, Shard: cell.Shard}] = v
	}
	return into
}

// sweep finds rows written later than MaxClockSkew, once per SweepInterval, by reading
// the lap's signal cells (see scanplan.Plan.Swept), and sends the next scan back to read
// them.
func (c *Consumer) sweep(ctx context.Context, now time.Time) {
	if !c.plan.SweepDue(now) {
		return
	}
	c.checkSkew(ctx, now)
	bNow := c.layout.Bucket(now)
	from := bNow - int64(c.layout.BucketCount) + 1
	// A read the client's watch shared since the last sweep, and within a quarter of
	// SweepInterval, serves as a sweep at its time.
	after := c.plan.LastSweep()
	if fresh := now.Add(-scanplan.SweepInterval / 4); fresh.After(after) {
		after = fresh
	}
	cells, touched, at, ok := c.state.SharedSweep(c.layout.Ring(), from, bNow, after)
	if !ok {
		var err error
		cells, touched, err = c.state.Store.Signals().LastTouches(ctx, c.layout.Ring(), from, bNow)
		if err != nil {
			c.log.WarnContext(ctx, "reading wake-up signals for late rows", "queue", c.q.Name, "error", err)
			return
		}
		at = now
	}
	slots := make(map[scanplan.Cell]scanplan.Slots, len(cells))
	for cell, ss := range cells {
		out := make(scanplan.Slots, len(ss))
		for slot, v := range ss {
			out[slot] = v
		}
		slots[scanplan.Cell{Bucket: cell.Bucket, Shard: cell.Shard}] = out
	}
	touches := make(map[scanplan.Entry]time.Time, len(touched))
	for e, t := range touched {
		touches[scanplan.Entry{Cell: scanplan.Cell{Bucket: e.Bucket, Shard: e.Shard}, Slot: e.Slot}] = t
	}
	late, unsure := c.plan.Swept(at, now.Sub(c.cluster.Now()), slots, touches)
	for cell := range unsure {
		pt := scanplan.Part{Key: c.layout.Key(cell.Bucket, cell.Shard), Shard: cell.Shard, Bucket: cell.Bucket}
		switch at, ok, err := c.firstVisible(ctx, &pt, now); {
		case err != nil:
			// This sweep is the last to see the write: unread, the cell is taken as late
			// from its bucket's start, and the next scan reads it from there.
			late[cell] = c.layout.BucketStart(cell.Bucket)
		case ok:
			late[cell] = at
		}
	}
	c.plan.Late(late)
	for cell, at := range late {
		c.log.DebugContext(ctx, "a write since the last sweep may lie below the floors; reading its partition again",
			"queue", c.q.Name, "partition_key", c.layout.Key(cell.Bucket, cell.Shard), "from", at)
	}
}

// checkSkew reports a Clock more than half MaxClockSkew from the cluster's time.
func (c *Consumer) checkSkew(ctx context.Context, now time.Time) {
	skew := now.Sub(c.cluster.Now())
	if skew.Abs() <= c.cfg.MaxClockSkew/2 {
		return
	}
	c.log.WarnContext(ctx, "the consumer's clock is off the cluster's time", "queue", c.q.Name, "skew", skew)
	c.cfg.Observer.Observe(ctx, shardqtype.ClockSkewed{Queue: c.q.Name, Skew: skew})
}
