// Package consumer takes due tasks from a queue and acks them.
//
// AcquireTasks visits the queue's partitions shard by shard. For each partition with due
// rows it takes the shard's lock (package lock), reads up to n due rows, and in one
// conditional batch on that partition deletes them, inserts a lease row per task (the
// timeout marker, visible again at its deadline) and releases the lock. The batch applies
// only while the lock is still held, so a consumer that stalled past its lock's TTL
// changes nothing. AckTasks deletes lease rows with conditional deletes: a lease that
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
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/shard"
)

// Defaults and limits for Config and calls.
const (
	DefaultMaxClockSkew = 2 * time.Second
	DefaultConcurrency  = 16
	DefaultLookAhead    = 5 * time.Second
	// MaxAcquire is the most tasks one AcquireTasks call may ask for; their leases are
	// written in one batch per partition.
	MaxAcquire = 1000
)

var (
	// ErrLeaseLost means a task's lease expired and the task was delivered again, or it
	// was acked already: this ack changed nothing.
	ErrLeaseLost = errors.New("consumer: lease lost")
	// ErrOutcomeUnknown means a write failed and reading back could not settle it. Tasks
	// it concerns come back after their timeout if they were not acked; none is lost.
	ErrOutcomeUnknown = errors.New("consumer: outcome unknown")
)

// Config configures a Consumer.
type Config struct {
	// Queue names the queue to consume, made with shardq.CreateQueue. Required.
	Queue string
	// MaxClockSkew bounds how far producers' clocks (plus write latency) may trail the
	// consumer's: a past time shard is treated as finished only this long after it ends.
	// A task written later than that into a finished shard waits until the ring comes
	// back to it. Defaults to DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// Concurrency is how many partitions AcquireTasks and AckTasks work on at once.
	// Defaults to DefaultConcurrency.
	Concurrency int
	// LookAhead is how far past now AcquireTasks looks for tasks coming due, to report
	// the earliest in NextDue. Defaults to DefaultLookAhead.
	LookAhead time.Duration
	// Observer receives BatchAcquired, LockContended, Acked and LeaseLost events.
	// Defaults to shardq.NopObserver.
	Observer shardq.Observer
	// Clock decides when tasks are due and leases expire. Defaults to shardq.SystemClock.
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

	lease taskrow.Row // the lease row Ack deletes
}

// Consumer takes and acks tasks of one queue. It is safe for concurrent use.
type Consumer struct {
	session *gocql.Session
	cfg     Config
	log     *slog.Logger

	q      shardq.QueueConfig
	layout shard.Layout
	locker *lock.Locker

	mu      sync.Mutex      // guards the fields below, and the three above while init sets them
	cursors []int64         // per concurrency shard: the oldest bucket that may hold work
	hot     map[string]bool // partitions whose last take was full: tried before any peek
	next    int             // the concurrency shard the next scan starts at
	nextDue time.Time       // earliest upcoming row the last scan saw; zero if none

	beforeSwap func() // tests only: runs between the locked read and the swap
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
		defaults.NonNegative(&cfg.Concurrency, DefaultConcurrency, "Config.Concurrency"),
		defaults.NonNegative(&cfg.LookAhead, DefaultLookAhead, "Config.LookAhead"),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = shardq.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = shardq.NopObserver{}
	}
	return &Consumer{session: session, cfg: cfg, log: cfg.Logger, hot: map[string]bool{}}, nil
}

// init loads the queue's settings once; a failure is retried on the next call.
func (c *Consumer) init(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locker != nil {
		return nil
	}
	q, err := shardq.LoadQueue(ctx, c.session, c.cfg.Queue)
	if err != nil {
		return err
	}
	locker, err := lock.New(c.session, lock.Config{TTL: q.LockTTL, Logger: c.log})
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
// highest priority first, then earliest due. It never returns a task before its due time,
// and skips shards whose lock another consumer holds rather than waiting. Ordering holds
// within a concurrency shard; across shards it is best effort.
func (c *Consumer) AcquireTasks(ctx context.Context, n int) ([]*Task, error) {
	if n < 1 || n > MaxAcquire {
		return nil, shardq.Invalid("n", "%d is not in [1, %d]", n, MaxAcquire)
	}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	now := c.cfg.Clock.Now()
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
	var err error
	if assumed >= n {
		out, err = c.takeAll(ctx, parts, n, now)
	}
	if err == nil && len(out) < n {
		for i := range parts {
			parts[i].avail = 0
		}
		err = c.peekAll(ctx, parts, n-len(out), now)
		if err == nil {
			c.advance(parts, now)
			var more []*Task
			more, err = c.takeAll(ctx, parts, n-len(out), now)
			out = append(out, more...)
		}
	}
	if err != nil {
		if len(out) == 0 {
			return nil, err
		}
		// The tasks taken are leased to us: hand them over rather than leave them to time
		// out. The next call meets the error again if it lasts.
		c.log.WarnContext(ctx, "acquire partly failed", "queue", c.q.Name, "error", err)
	}
	slices.SortStableFunc(out, func(a, b *Task) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return a.DueAt.Compare(b.DueAt)
	})
	return out, nil
}

// takeAll takes up to n tasks from the partitions with rows available, in parallel
// rounds. Each round hands out what is still wanted in scan order, each partition as
// much as it was seen to have, so a backlogged partition fills a whole batch with one
// lock and one swap while a trickle is gathered from many at once. A partition that gave
// all it was asked and may hold more goes back in line. Every round either retires
// partitions or gains tasks, so the loop ends. Shards another consumer holds are skipped.
func (c *Consumer) takeAll(ctx context.Context, parts []part, n int, now time.Time) ([]*Task, error) {
	var line []part
	for _, pt := range parts {
		if pt.avail > 0 {
			line = append(line, pt)
		}
	}
	var out []*Task
	for len(line) > 0 && len(out) < n {
		var round []part
		var shares []int
		for want := n - len(out); len(line) > 0 && want > 0; line = line[1:] {
			share := min(line[0].avail, want)
			round, shares = append(round, line[0]), append(shares, share)
			want -= share
		}
		got := make([][]*Task, len(round))
		err := fanout.Each(len(round), c.cfg.Concurrency, func(i int) error {
			var err error
			got[i], err = c.take(ctx, round[i].key, shares[i], now)
			if errors.Is(err, lock.ErrLockHeld) {
				return nil
			}
			return err
		})
		for i, g := range got {
			out = append(out, g...)
			if len(g) == shares[i] && round[i].avail >= peekLimit {
				line = append(line, round[i])
			}
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// part is one partition a scan considers.
type part struct {
	key      string
	shard    int
	bucket   int64
	avail    int       // rows visible now, as far as seen (peekLimit: maybe more)
	next     time.Time // earliest row seen that is not yet visible; zero if none
	finished bool      // a past bucket with nothing of its lap left: the cursor may pass it
}

// peekLimit bounds the rows one peek reads. A partition with more rows of its lap than
// this, none of them due among those read, gets one more read for due rows.
const peekLimit = 100

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
			pt := part{key: key, shard: s, bucket: b}
			if c.hot[key] {
				pt.avail = peekLimit
			}
			parts = append(parts, pt)
		}
	}
	return parts
}

// peek reads the rows of a partition's lap in one query: whether any is visible now,
// when the next one becomes visible, and, for a past bucket that ended more than
// MaxClockSkew ago, whether none is left (pending tasks or leases not yet acked). Rows
// of later laps wait in the same partition for their own lap and are not read.
func (c *Consumer) peek(ctx context.Context, pt *part, now time.Time) error {
	lapEnd := c.layout.BucketStart(pt.bucket + int64(c.q.BucketCount))
	iter := c.session.Query(taskrow.SelectBefore, pt.key, gocql.UUID(shard.MinID(lapEnd)), peekLimit).WithContext(ctx).Iter()
	var id gocql.UUID
	n := 0
	for iter.Scan(&id) {
		n++
		switch at := shard.IDTime(uuid.UUID(id)); {
		case !at.After(now):
			pt.avail++
		case pt.next.IsZero() || at.Before(pt.next):
			pt.next = at
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("consumer: reading %s: %w", pt.key, err)
	}
	if n == peekLimit && pt.avail == 0 {
		// A full read in priority order may hide due rows of lower priority.
		rows, err := c.visible(ctx, pt.key, 1, now)
		if err != nil {
			return err
		}
		if len(rows) > 0 {
			pt.avail = peekLimit
		}
		pt.next = now // the next due time is unknown: look again soon
	}
	pt.finished = n == 0 && !now.Before(c.layout.BucketStart(pt.bucket+1).Add(c.cfg.MaxClockSkew))
	return nil
}

// peekAll peeks at the partitions of buckets up to now, and at the look-ahead buckets
// only when those hold fewer than want visible rows: rows coming due later matter for
// NextDue, which matters only to a consumer that is about to go idle.
func (c *Consumer) peekAll(ctx context.Context, parts []part, want int, now time.Time) error {
	bNow := c.layout.Bucket(now)
	var current, ahead []int
	for i, pt := range parts {
		if pt.bucket <= bNow {
			current = append(current, i)
		} else {
			ahead = append(ahead, i)
		}
	}
	avail := 0
	for _, idx := range [][]int{current, ahead} {
		if avail >= want {
			break
		}
		if err := fanout.Each(len(idx), c.cfg.Concurrency, func(i int) error {
			return c.peek(ctx, &parts[idx[i]], now)
		}); err != nil {
			return err
		}
		for _, i := range idx {
			avail += parts[i].avail
		}
	}
	return nil
}

// advance moves each shard's cursor past its leading run of finished buckets, and
// records the earliest upcoming row for NextDue.
func (c *Consumer) advance(parts []part, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextDue = time.Time{}
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
}

// NextDue returns the earliest time at which the last AcquireTasks saw a row become
// visible (a task coming due or a lease expiring) within LookAhead, or zero if it saw
// none. Tasks scheduled since then are not counted.
func (c *Consumer) NextDue() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextDue
}

// take leases up to want due rows of one partition.
func (c *Consumer) take(ctx context.Context, key string, want int, now time.Time) ([]*Task, error) {
	t0 := time.Now()
	lease, err := c.locker.Acquire(ctx, key)
	if errors.Is(err, lock.ErrLockHeld) {
		c.cfg.Observer.Observe(ctx, shardq.LockContended{Queue: c.q.Name, ShardKey: key})
	}
	if err != nil {
		return nil, err
	}
	lockWait := time.Since(t0)
	rows, err := c.visible(ctx, key, want, now)
	c.mu.Lock()
	if err == nil && len(rows) == want {
		c.hot[key] = true
	} else {
		delete(c.hot, key)
	}
	c.mu.Unlock()
	if err != nil || len(rows) == 0 {
		return nil, errors.Join(err, c.release(ctx, lease))
	}
	if c.beforeSwap != nil {
		c.beforeSwap()
	}
	tasks, err := c.swap(ctx, lease, rows, now)
	if len(tasks) > 0 {
		c.cfg.Observer.Observe(ctx, shardq.BatchAcquired{Queue: c.q.Name, ShardKey: key, Size: len(tasks), LockWait: lockWait})
	}
	return tasks, err
}

func (c *Consumer) visible(ctx context.Context, key string, limit int, now time.Time) ([]taskrow.Row, error) {
	iter := c.session.Query(taskrow.SelectVisible, key, gocql.UUID(shard.MaxID(now)), limit).WithContext(ctx).Iter()
	rows, err := taskrow.Scan(iter, key)
	if err != nil {
		return nil, fmt.Errorf("consumer: reading %s: %w", key, err)
	}
	return rows, nil
}

func (c *Consumer) release(ctx context.Context, lease *lock.Lease) error {
	if err := lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) {
		return fmt.Errorf("consumer: releasing %s: %w", lease.Key(), err)
	}
	return nil
}

// swap replaces rows with lease rows and releases the lock, in one conditional batch that
// applies only while lease holds the lock and every expired lease among rows still
// exists (its holder may be acking it right now).
func (c *Consumer) swap(ctx context.Context, lease *lock.Lease, rows []taskrow.Row, now time.Time) ([]*Task, error) {
	b := c.session.NewBatch(gocql.LoggedBatch).WithContext(ctx)
	b.RetryPolicy(lwt.NoRetry)
	stmt, args := lease.ReleaseStatement()
	b.Query(stmt, args...)
	tasks := make([]*Task, len(rows))
	for i, r := range rows {
		if r.Attempt == 0 {
			b.Query(taskrow.Delete, r.KeyArgs()...)
		} else {
			b.Query(taskrow.DeleteIfExists, r.KeyArgs()...)
		}
		deadline := now.Add(r.Timeout)
		next := r
		next.ID = gocql.UUID(shard.NewID(deadline))
		next.Attempt++
		b.Query(taskrow.Insert, next.InsertArgs()...)
		tasks[i] = &Task{ID: uuid.UUID(r.TaskID), Queue: c.q.Name, Payload: r.Payload, DueAt: r.DueAt,
			Priority: int(r.Priority), Attempt: next.Attempt, Deadline: deadline, lease: next}
	}
	applied, iter, err := c.session.ExecuteBatchCAS(b)
	if err == nil {
		err = iter.Close()
	}
	switch {
	case err != nil:
		return c.settleSwap(ctx, lease, tasks, err)
	case !applied:
		// The lock expired under us, or a lease we meant to redeliver was acked first.
		// Nothing changed; the partition is read afresh next time.
		c.log.DebugContext(ctx, "swap not applied", "shard_key", lease.Key())
		return nil, c.release(ctx, lease)
	}
	c.log.DebugContext(ctx, "leased tasks", "shard_key", lease.Key(), "tasks", len(tasks), "fencing_token", lease.Token())
	return tasks, nil
}

// settleSwap decides a swap whose outcome is unknown. Releasing the lock first, as a new
// LWT, voids a straggling swap (it is conditioned on our holding the lock); after that a
// SERIAL read of one new lease row tells whether the swap applied.
func (c *Consumer) settleSwap(ctx context.Context, lease *lock.Lease, tasks []*Task, cause error) ([]*Task, error) {
	c.log.WarnContext(ctx, "swap outcome unknown, settling", "shard_key", lease.Key(), "error", cause)
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	if err := c.release(rctx, lease); err != nil {
		return nil, fmt.Errorf("%w: swap in %s: %w (%w)", ErrOutcomeUnknown, lease.Key(), cause, err)
	}
	err := c.session.Query(taskrow.SelectOne, tasks[0].lease.KeyArgs()...).
		WithContext(rctx).Consistency(lwt.Serial).Scan(new(gocql.UUID))
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: swap in %s: %w (reading back: %w)", ErrOutcomeUnknown, lease.Key(), cause, err)
	}
	return tasks, nil
}

// AckError lists the tasks whose ack failed. It matches ErrLeaseLost when any lease was
// lost, and the errors of acks that failed otherwise.
type AckError struct {
	Lost   []uuid.UUID
	Failed map[uuid.UUID]error
}

func (e *AckError) Error() string {
	return fmt.Sprintf("consumer: %d ack(s) lost their lease, %d failed", len(e.Lost), len(e.Failed))
}

func (e *AckError) Unwrap() []error {
	var errs []error
	if len(e.Lost) > 0 {
		errs = append(errs, ErrLeaseLost)
	}
	for _, err := range e.Failed {
		errs = append(errs, err)
	}
	return errs
}

// AckTasks marks tasks done by deleting their lease rows: one conditional batch per
// partition. A task whose lease was lost is listed in an *AckError (ErrLeaseLost); the
// others are acked all the same.
func (c *Consumer) AckTasks(ctx context.Context, tasks ...*Task) error {
	groups := map[string][]*Task{}
	var keys []string
	for i, t := range tasks {
		if err := c.checkOwn(ctx, t, fmt.Sprintf("tasks[%d]", i)); err != nil {
			return err
		}
		if _, ok := groups[t.lease.Key]; !ok {
			keys = append(keys, t.lease.Key)
		}
		groups[t.lease.Key] = append(groups[t.lease.Key], t)
	}
	var mu sync.Mutex
	ackErr := &AckError{Failed: map[uuid.UUID]error{}}
	_ = fanout.Each(len(keys), c.cfg.Concurrency, func(i int) error {
		lost, failed := c.ackGroup(ctx, groups[keys[i]])
		mu.Lock()
		defer mu.Unlock()
		ackErr.Lost = append(ackErr.Lost, lost...)
		for id, err := range failed {
			ackErr.Failed[id] = err
		}
		return nil
	})
	if acked := len(tasks) - len(ackErr.Lost) - len(ackErr.Failed); acked > 0 {
		c.cfg.Observer.Observe(ctx, shardq.Acked{Queue: c.q.Name, Count: acked})
	}
	for _, id := range ackErr.Lost {
		c.cfg.Observer.Observe(ctx, shardq.LeaseLost{Queue: c.q.Name, TaskID: id})
	}
	if len(ackErr.Lost) == 0 && len(ackErr.Failed) == 0 {
		return nil
	}
	return ackErr
}

// ackGroup acks tasks of one partition. When the batch fails a condition, at least one
// lease is gone; acking one by one tells which.
func (c *Consumer) ackGroup(ctx context.Context, tasks []*Task) (lost []uuid.UUID, failed map[uuid.UUID]error) {
	failed = map[uuid.UUID]error{}
	if len(tasks) > 1 {
		b := c.session.NewBatch(gocql.LoggedBatch).WithContext(ctx)
		b.RetryPolicy(lwt.NoRetry)
		for _, t := range tasks {
			b.Query(taskrow.DeleteIfExists, t.lease.KeyArgs()...)
		}
		applied, iter, err := c.session.ExecuteBatchCAS(b)
		if err == nil {
			err = iter.Close()
		}
		if err == nil && applied {
			return nil, nil
		}
		// Not applied, or unknown: each single ack below settles its own task.
	}
	for _, t := range tasks {
		switch err := c.ackOne(ctx, t); {
		case errors.Is(err, ErrLeaseLost):
			lost = append(lost, t.ID)
		case err != nil:
			failed[t.ID] = err
		}
	}
	return lost, failed
}

func (c *Consumer) ackOne(ctx context.Context, t *Task) error {
	for range 2 {
		applied, err := c.session.Query(taskrow.DeleteIfExists, t.lease.KeyArgs()...).
			WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(map[string]any{})
		if err == nil {
			if !applied {
				return ErrLeaseLost
			}
			return nil
		}
		// Unknown outcome. A straggling delete can only remove this very lease row, so
		// reading it back at SERIAL settles the ack.
		rctx, cancel := lwt.ResolveContext(ctx)
		rerr := c.session.Query(taskrow.SelectOne, t.lease.KeyArgs()...).
			WithContext(rctx).Consistency(lwt.Serial).Scan(new(gocql.UUID))
		cancel()
		switch {
		case errors.Is(rerr, gocql.ErrNotFound) && c.cfg.Clock.Now().Before(t.Deadline):
			return nil // gone before its deadline: no one else could have taken it
		case errors.Is(rerr, gocql.ErrNotFound):
			return fmt.Errorf("%w: ack of %s after its deadline: %w", ErrOutcomeUnknown, t.ID, err)
		case rerr != nil:
			return fmt.Errorf("%w: ack of %s: %w (reading back: %w)", ErrOutcomeUnknown, t.ID, err, rerr)
		}
		// Still there: the delete did not apply, and trying once more is a new decision.
	}
	return fmt.Errorf("%w: ack of %s failed twice", ErrOutcomeUnknown, t.ID)
}
