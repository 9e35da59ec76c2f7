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
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
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
	SweepInterval = 10 * time.Second
	// MaxTakeBytes bounds the payload bytes one locked read takes from a partition; the
	// rest wait for the next call. Markers are written in batches of at most
	// taskrow.MaxBatchBytes, so no write comes near Cassandra's mutation limit.
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
	// PartitionFailed events. Defaults to shardq.NopObserver.
	Observer shardq.Observer
	// Clock decides when tasks are due and leases expire, and stamps writes (never past
	// the cluster's time). Defaults to the cluster's time: this host's clock corrected by
	// its measured offset from the coordinators', so a host whose clock leads never
	// delivers early. A Clock given here is trusted; a skew of more than half
	// MaxClockSkew from the cluster's time is reported (shardq.ClockSkewed).
	Clock shardq.Clock
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
	// Attempt counts deliveries: 1 on the first.
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

	marker  taskrow.Row // the timeout marker Ack deletes
	visible time.Time   // when the row it was taken from became visible: its place in line
	steps   int64       // index writes this delivery made after the swap (taskindex.Stamp)
}

// Consumer takes and acks tasks of one queue. It is safe for concurrent use.
type Consumer struct {
	session *gocql.Session
	cfg     Config
	log     *slog.Logger
	state   *sessionstate.State
	cluster *clustertime.Clock

	q       shardq.QueueConfig
	layout  shard.Layout
	locker  *locking.Locker
	signals *signal.Toucher
	series  *series.Env

	mu           sync.Mutex      // guards the fields below, and the three above while init sets them
	cursors      []int64         // per concurrency shard: the oldest bucket that may hold work
	hot          map[string]bool // partitions whose last take was full: tried before any peek
	floors       map[pkey]*floors
	keptFloors   map[string]lapFloors         // per partition, the floors of the latest lap forgotten
	next         int                          // the concurrency shard the next scan starts at
	nextDue      time.Time                    // earliest upcoming row the last scan saw; zero if none
	short        bool                         // the last call found fewer tasks than it asked for
	pageRows     int                          // rows per page of a locked read, from the largest payload seen
	fullAt       time.Time                    // when an idle scan last read every candidate
	fullCells    map[signal.Cell]gocql.UUID   // the signal cells as that scan found them
	upcoming     map[pkey]time.Time           // per partition, the next row seen coming due
	lateChecked  map[pkey]signal.Slots        // finished partitions lateRow read, with their cell as swept before
	swept        time.Time                    // when the signal cells were last read for late rows
	cells        map[signal.Cell]signal.Slots // the lap's signal cells as last read; nil before
	sweptCursors []int64                      // the cursors when the cells were last read

	beforeSwap func()            // tests only: runs between the locked read and the swap
	afterSwap  func(error) error // tests only: what the swap's LWT returned, and what to make of it
	afterAck   func(error) error // tests only: what an ack batch's LWT returned, and what to make of it
	failRead   func(key string) error
	crash      func(step string) bool // tests only: true stops at step as if the process died
}

// New returns a Consumer of cfg.Queue. The queue's settings are read on first use.
func New(session *gocql.Session, cfg Config) (*Consumer, error) {
	if session == nil {
		return nil, shardq.Invalid("session", "is nil")
	}
	if !shard.ValidQueueName(cfg.Queue) {
		return nil, shardq.Invalid("Config.Queue", "%q is not a valid queue name", cfg.Queue)
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
	st := sessionstate.For(session, cfg.Logger)
	cluster := st.ClusterFor(cfg.Clock)
	if cfg.Clock == nil {
		cfg.Clock = cluster
	}
	if cfg.Observer == nil {
		cfg.Observer = shardq.NopObserver{}
	}
	signals := st.Signals
	return &Consumer{session: session, cfg: cfg, log: cfg.Logger, state: st, cluster: cluster, hot: map[string]bool{},
		floors: map[pkey]*floors{}, keptFloors: map[string]lapFloors{}, upcoming: map[pkey]time.Time{}, lateChecked: map[pkey]signal.Slots{}, pageRows: initialPageRows,
		signals: signals, series: &series.Env{Store: st.Store.Series(), Tasks: st.Store.Tasks(), Clock: cfg.Clock, Cluster: cluster, Log: cfg.Logger, Signals: signals, Bus: st.Bus}}, nil
}

// init loads the queue's settings once; a failure is retried on the next call.
func (c *Consumer) init(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locker != nil {
		return nil
	}
	q, err := c.state.Queue(ctx, c.cfg.Queue)
	if err != nil {
		return err
	}
	c.cluster.Ready(ctx)
	locker, err := locking.New(c.session, locking.Config{TTL: q.LockTTL, Logger: c.log})
	if err != nil {
		return err
	}
	c.q, c.layout, c.locker = q, q.Layout(), locker
	c.cursors = make([]int64, q.ShardCount)
	start := c.layout.Bucket(c.cfg.Clock.Now()) - int64(q.BucketCount) + 1
	for i := range c.cursors {
		c.cursors[i] = start // a new consumer looks back one whole lap
	}
	// Start consumers at different shards so that N consumers on S shards rarely collide.
	c.next = rand.IntN(q.ShardCount)
	return nil
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
func (c *Consumer) AcquireTasks(ctx context.Context, n int) ([]*Task, error) {
	if n < 1 || n > MaxAcquire {
		return nil, shardq.Invalid("n", "%d is not in [1, %d]", n, MaxAcquire)
	}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	now := c.cfg.Clock.Now()
	c.sweep(ctx, now)
	c.mu.Lock()
	idle := c.short
	c.mu.Unlock()
	parts := c.candidates(now)
	// Partitions whose last take was full are assumed to hold more: when they can fill
	// the call, they are tried first without reading the others. Otherwise, or when they
	// fall short, every candidate is peeked at once, so an idle queue costs one round of
	// parallel reads, not one read after another.
	assumed := 0
	for _, pt := range parts {
		assumed += pt.avail
	}
	var out []*Task
	c.mu.Lock()
	c.nextDue = time.Time{}
	c.mu.Unlock()
	if assumed >= n {
		out = c.takeAll(ctx, parts, n, now)
	}
	var readErr error
	if len(out) < n {
		for i := range parts {
			parts[i].avail = 0
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
		c.advance(parts, now)
		out = append(out, got...)
	}
	c.mu.Lock()
	c.short = len(out) < n
	c.mu.Unlock()
	if len(out) == 0 && readErr != nil {
		return nil, readErr
	}
	slices.SortStableFunc(out, func(a, b *Task) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return a.visible.Compare(b.visible)
	})
	return out, nil
}

// part is one partition a scan considers.
type part struct {
	key      string
	shard    int
	bucket   int64
	ahead    bool      // a bucket that starts after now: read only for NextDue
	avail    int       // rows visible now, as far as seen (peekLimit: maybe more)
	next     time.Time // earliest row seen that is not yet visible; zero if none
	finished bool      // a past bucket with nothing of its lap left: the cursor may pass it
	err      error     // reading it failed
}

// candidates lists the partitions to look at, shard by shard from a rotating start so
// that consumers spread over shards, oldest bucket first within a shard, up to the
// bucket LookAhead from now.
func (c *Consumer) candidates(now time.Time) []part {
	bNow := c.layout.Bucket(now)
	bLast := c.layout.Bucket(now.Add(c.cfg.LookAhead))
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.next
	c.next = (c.next + 1) % c.q.ShardCount
	var parts []part
	for i := range c.q.ShardCount {
		s := (first + i) % c.q.ShardCount
		for b := max(c.cursors[s], bNow-int64(c.q.BucketCount)+1); b <= bLast; b++ {
			key := c.layout.Key(b, s)
			pt := part{key: key, shard: s, bucket: b, ahead: b > bNow}
			if c.hot[key] && !pt.ahead {
				pt.avail = peekLimit
			}
			parts = append(parts, pt)
		}
	}
	return parts
}

// advance moves each shard's cursor past its leading run of finished buckets, forgets
// the floors of partitions behind the cursors, and records the earliest upcoming row for
// NextDue.
func (c *Consumer) advance(parts []part, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	blocked := map[int]bool{}
	for _, pt := range parts {
		if !pt.next.IsZero() && (c.nextDue.IsZero() || pt.next.Before(c.nextDue)) {
			c.nextDue = pt.next
		}
		if blocked[pt.shard] || !pt.finished {
			blocked[pt.shard] = true
			continue
		}
		if c.cursors[pt.shard] <= pt.bucket {
			c.cursors[pt.shard] = pt.bucket + 1
		}
	}
	lapStart := c.layout.Bucket(now) - int64(c.q.BucketCount) + 1
	for k, f := range c.floors {
		if _, _, s, err := shard.ParseKey(k.key); err != nil || k.bucket < max(c.cursors[s], lapStart) {
			if kept, ok := c.keptFloors[k.key]; !ok || kept.bucket < k.bucket {
				c.keptFloors[k.key] = lapFloors{k.bucket, *f}
			}
			delete(c.floors, k)
			delete(c.hot, k.key)
			delete(c.upcoming, k)
			delete(c.lateChecked, k)
		}
	}
}

// Queue returns the settings of the consumer's queue, loading them on first use.
func (c *Consumer) Queue(ctx context.Context) (shardq.QueueConfig, error) {
	if err := c.init(ctx); err != nil {
		return shardq.QueueConfig{}, err
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
	defer c.mu.Unlock()
	return c.nextDue
}

// observeFailure reports one partition's failure and goes on.
func (c *Consumer) observeFailure(ctx context.Context, key, op string, err error) {
	c.log.WarnContext(ctx, "partition failed; going on with the others", "queue", c.q.Name, "shard_key", key, "op", op, "error", err)
	c.cfg.Observer.Observe(ctx, shardq.PartitionFailed{Queue: c.q.Name, ShardKey: key, Op: op, Err: err})
}

func wrapErr(what, key string, err error) error {
	return fmt.Errorf("consumer: %s %s: %w", what, key, err)
}

// touch touches the wake-up signal cells of markers just written, so idle workers
// elsewhere know what comes due when. It outlives ctx, whose end may be what failed the
// write. A failure is logged.
func (c *Consumer) touch(ctx context.Context, rows []taskrow.Row) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signal.TouchTimeout)
	defer cancel()
	var touches signal.Touches
	for _, r := range rows {
		touches.Add(c.layout, uuid.UUID(r.ID), uuid.UUID(r.TaskID))
	}
	if err := c.signals.Touch(ctx, &touches); err != nil {
		c.log.WarnContext(ctx, "touching wake-up signals", "queue", c.q.Name, "error", err)
	}
}

// touchedCells reads which signal cells of the buckets of parts were touched, or nil when
// they cannot be read.
func (c *Consumer) touchedCells(ctx context.Context, parts []part) map[signal.Cell]gocql.UUID {
	if len(parts) == 0 {
		return nil
	}
	from, to := parts[0].bucket, parts[0].bucket
	for _, pt := range parts {
		from, to = min(from, pt.bucket), max(to, pt.bucket)
	}
	cells, err := signal.Cells(ctx, c.session, c.q.Name, from, to)
	if err != nil {
		c.log.WarnContext(ctx, "reading wake-up signals; reading every partition", "queue", c.q.Name, "error", err)
		return nil
	}
	return cells
}

// cellOf is pt's signal cell.
func (c *Consumer) cellOf(pt *part) signal.Cell {
	return signal.Cell{Queue: c.q.Name, Bucket: pt.bucket, Shard: pt.shard}
}

// untouched reports whether cells (when known) show that nothing was written into pt in
// its lap: no task, no marker, so no swap either.
func (c *Consumer) untouched(cells map[signal.Cell]gocql.UUID, pt *part) bool {
	_, ok := cells[c.cellOf(pt)]
	return cells != nil && !ok
}

// sweep finds rows written later than MaxClockSkew. Every write touches the entry of its
// cell's slot with the earliest row time it wrote, and an entry keeps the touch made last
// in real time, so once per SweepInterval one read of the lap's cells shows each slot
// written since the last sweep, and when it was touched last. Floors rest at least
// MaxClockSkew below the reading consumer's clock, which is within half of it from the
// cluster's (checkSkew), so a slot last touched within half MaxClockSkew of its start
// holds no row written after a read that passed it. One touched later may hold a late
// write if this consumer's floors for its partition lie above the slot's start, or its
// bucket was passed by the cursor by the last sweep, or (for a partition it holds no
// floors for) it starts before the last sweep less MaxClockSkew: the partition's floors
// are lowered below the slot and the cursor moved back, so the next scan reads it. (A
// write whose touch failed is found when the ring comes back to its partition.)
func (c *Consumer) sweep(ctx context.Context, now time.Time) {
	c.mu.Lock()
	due := c.cells == nil || !now.Before(c.swept.Add(SweepInterval))
	c.mu.Unlock()
	if !due {
		return
	}
	c.checkSkew(ctx, now)
	bNow := c.layout.Bucket(now)
	cells, touched, err := signal.LastTouches(ctx, c.session, c.q.Name, bNow-int64(c.q.BucketCount)+1, bNow)
	if err != nil {
		c.log.WarnContext(ctx, "reading wake-up signals for late rows", "queue", c.q.Name, "error", err)
		return
	}
	c.mu.Lock()
	last, lateBefore, passed := c.cells, c.swept.Add(-c.cfg.MaxClockSkew), c.sweptCursors
	c.cells, c.swept, c.sweptCursors = cells, now, slices.Clone(c.cursors)
	late, unsure := lateSlots(sweepState{
		layout: c.layout, skew: c.cfg.MaxClockSkew, offset: now.Sub(c.cluster.Now()),
		cells: cells, touched: touched, last: last, lateBefore: lateBefore,
		passed: passed, cursors: c.cursors, floors: c.floors,
	})
	c.mu.Unlock()
	for cell := range unsure {
		pt := part{key: c.layout.Key(cell.Bucket, cell.Shard), shard: cell.Shard, bucket: cell.Bucket}
		if at, ok := c.firstVisible(ctx, &pt, now); ok {
			late[cell] = at
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for cell, at := range late {
		k := pkey{c.layout.Key(cell.Bucket, cell.Shard), cell.Bucket}
		below := gocql.UUID(shard.MinID(at.Add(-100 * time.Nanosecond)))
		if _, ok := c.floors[k]; !ok {
			// Floors recorded by others may lie above the late rows: read the lap.
			below = minID(below, gocql.UUID(shard.MinID(c.layout.BucketStart(cell.Bucket-int64(c.q.BucketCount)))))
			c.floors[k] = &floors{}
		}
		for p, f := range c.floors[k] {
			c.floors[k][p] = minID(f, below)
			if f == (gocql.UUID{}) {
				c.floors[k][p] = below
			}
		}
		c.cursors[cell.Shard] = min(c.cursors[cell.Shard], cell.Bucket)
		// An idle scan reads, between full scans, only partitions marked or whose cell
		// changed since the last full one, which a late write may not have.
		c.upcoming[k] = revisit
		c.log.DebugContext(ctx, "a write since the last sweep may lie below the floors; reading its partition again",
			"queue", c.q.Name, "shard_key", k.key, "from", at)
	}
}

// sweepState is what a sweep decides from: the lap's cells as just read (cells, and when
// each slot was touched by the cluster's clock), as the last sweep read them (last), and
// the consumer's cursors, floors and clock offset from the cluster's.
type sweepState struct {
	layout     shard.Layout
	skew       time.Duration // MaxClockSkew
	offset     time.Duration // the consumer's clock less the cluster's
	cells      map[signal.Cell]signal.Slots
	touched    map[signal.Entry]time.Time
	last       map[signal.Cell]signal.Slots
	lateBefore time.Time // the last sweep less skew
	passed     []int64   // the cursors at the last sweep
	cursors    []int64
	floors     map[pkey]*floors
}

// lateSlots returns, per cell, where its floors must go below for a late write (late),
// and the cells passed since the last sweep and written into after their slot could still
// be written on time, which only a read tells (unsure). See sweep.
func lateSlots(st sweepState) (late map[signal.Cell]time.Time, unsure map[signal.Cell]bool) {
	late, unsure = map[signal.Cell]time.Time{}, map[signal.Cell]bool{}
	for cell, slots := range st.cells {
		if st.last == nil || cell.Shard >= len(st.cursors) {
			continue // a new consumer reads the whole lap anyway
		}
		f, haveFloors := st.floors[pkey{st.layout.Key(cell.Bucket, cell.Shard), cell.Bucket}]
		for slot, v := range slots {
			start := signal.SlotStart(st.layout, cell.Bucket, slot)
			touched := st.touched[signal.Entry{Cell: cell, Slot: slot}].Add(st.offset)
			if st.last[cell][slot] == v || !touched.After(start.Add(st.skew/2-clockError)) {
				continue // not touched since the last sweep, or on time
			}
			switch {
			case cell.Bucket < st.passed[cell.Shard],
				haveFloors && f.above(start),
				!haveFloors && start.Before(st.lateBefore):
				// Written into a bucket the cursor had passed by the last sweep, or where
				// the floors may lie above its rows: late. The entry holds the last touch of
				// its slot, whose rows may lie above an earlier late touch's, so the slot's
				// start decides, and the floors go below it.
				if t, ok := late[cell]; !ok || start.Before(t) {
					late[cell] = start
				}
			case cell.Bucket < st.cursors[cell.Shard]:
				// Passed since the last sweep: the write may have come before the pass (and
				// been read by it) or after.
				unsure[cell] = true
			}
		}
	}
	for cell := range late {
		delete(unsure, cell)
	}
	return late, unsure
}

// clockError bounds how far the cluster's time as a writer estimated it (internal/clustertime),
// which its rows' times come from, may lie from the coordinators' clocks that stamp touches.
const clockError = 100 * time.Millisecond

// checkSkew reports a Clock more than half MaxClockSkew from the cluster's time.
func (c *Consumer) checkSkew(ctx context.Context, now time.Time) {
	skew := now.Sub(c.cluster.Now())
	if skew.Abs() <= c.cfg.MaxClockSkew/2 {
		return
	}
	c.log.WarnContext(ctx, "the consumer's clock is off the cluster's time", "queue", c.q.Name, "skew", skew)
	c.cfg.Observer.Observe(ctx, shardq.ClockSkewed{Queue: c.q.Name, Skew: skew})
}
