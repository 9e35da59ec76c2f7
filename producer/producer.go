// Package producer schedules tasks: ScheduleTask and ScheduleTasks write them into the
// partition of their due time and concurrency shard, where consumers find them once due.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/combine"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/spread"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Defaults and limits for Config and tasks.
const (
	DefaultMaxPayloadBytes = 64 << 10
	MaxPayloadLimit        = 1 << 20
	DefaultWritesInFlight  = 8
	DefaultWriteAttempts   = 3
	// DefaultShardRate fills a shard with 20 tasks of a tenth of a second (200 a second)
	// before the next is opened: a queue at 100 tasks/s stays in one partition a bucket.
	DefaultShardRate = 200
	// MaxHeaderBytes bounds a task's Headers: the bytes of their keys and values, which
	// count toward Config.MaxPayloadBytes too.
	MaxHeaderBytes = 4 << 10
	// MaxKindBytes bounds a task's Kind.
	MaxKindBytes = 200
	// MaxDueAhead bounds how far ahead of now a task may be due: the signal cell a write
	// touches lives at most Cassandra's longest TTL (20 years) and must outlive the
	// task's bucket, whose partition idle consumers read only if its cell shows a write.
	MaxDueAhead = 19 * 365 * 24 * time.Hour
)

var (
	// ErrPayloadTooLarge is matched, with shardqtype.ErrInvalid, by a task whose payload and
	// headers together are over Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("producer: payload too large")
	// ErrHeadersTooLarge is matched, with shardqtype.ErrInvalid, by a task whose headers are
	// over MaxHeaderBytes.
	ErrHeadersTooLarge = errors.New("producer: headers too large")
)

// Config configures a Producer.
type Config struct {
	// MaxPayloadBytes is the largest payload accepted, at most MaxPayloadLimit.
	// Defaults to DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// WritesInFlight is how many partition batches ScheduleTasks writes at once.
	// Defaults to DefaultWritesInFlight.
	WritesInFlight int
	// WriteAttempts is how many times a partition batch whose write timed out is sent in
	// all, with the same write timestamp each time: a copy that lands late is shadowed by
	// a consumer's later delete, so sending again cannot bring a taken task back. Only
	// then is the batch's tasks reported in a *PartialError. 1 sends once. Defaults to
	// DefaultWriteAttempts.
	WriteAttempts int
	// ShardRate is how many tasks due in one second this producer places in one of a
	// queue's concurrency shards before it fills the next, counted per tenth of a second
	// of due time: the n-th task due in a tenth goes to shard (n-1)/ceil(ShardRate/10)
	// while the layout has it, and to any shard past that (so below 10, ShardRate acts as
	// 10). A queue at a low rate then sits in few partitions, which is what consumers'
	// rounds cost (a lock, a read and a swap per partition with tasks), and a burst
	// spreads over all of them. Producers count apart: each of several producers of a
	// queue may place ShardRate tasks a second in its first shard. Defaults to
	// DefaultShardRate.
	ShardRate int
	// Clock gives "now" for tasks due now, for bucket choice and for write timestamps
	// (never past the cluster's time). Defaults to the cluster's time: this host's clock
	// corrected by its measured offset from the coordinators'.
	Clock shardqtype.Clock
	// Logger receives debug events. Defaults to a logger that discards.
	Logger *slog.Logger
	// Middleware wraps every ScheduleTask and ScheduleTasks call, to add headers to the
	// tasks or watch the call (package shardqotel's traces them). Reschedule and
	// ReplayDeadLetter do not pass through it: a task keeps the headers it was scheduled
	// with. Defaults to none.
	Middleware Middleware
}

// ScheduleFunc schedules tasks as ScheduleTasks does and returns their IDs in order.
type ScheduleFunc func(ctx context.Context, tasks []Task) ([]uuid.UUID, error)

// Middleware wraps the scheduling of tasks: the ScheduleFunc it returns may change the
// context and the tasks before it calls next, and see what next returned. tasks is the
// caller's slice: a middleware that changes tasks passes next a copy. Chain several by
// nesting them.
type Middleware func(next ScheduleFunc) ScheduleFunc

// Task is a task to schedule.
type Task struct {
	// Queue names a queue made with shardq.CreateQueue.
	Queue string
	// Payload is handed to the consumer as is.
	Payload []byte
	// DueAt is when the task may run; zero means now. A past time means now too: the
	// task is ordered among due tasks by the time it was scheduled.
	DueAt time.Time
	// Priority in [shardqtype.MinPriority, shardqtype.MaxPriority]; higher runs first among
	// due tasks of a shard.
	Priority int
	// Timeout is how long a consumer has to ack the task before it is delivered again.
	// Zero means the queue's DefaultTimeout.
	Timeout time.Duration
	// Key, when set, makes the task unique in its queue: scheduling fails with a
	// *DuplicateError while another task with this key is pending, in flight or
	// retrying. The key is free again once that task is acked, cancelled or dead.
	// At most MaxKeyBytes bytes.
	Key string
	// Headers are metadata kept with the task, across retries, reschedules, dead letters
	// and replays, and handed to its handler (consumer.Task.Headers): a trace context, say.
	// Keys are not empty; keys and values are UTF-8, at most MaxHeaderBytes in all, and
	// count toward Config.MaxPayloadBytes. A task without headers stores nothing for them.
	Headers map[string]string
	// Kind names the task's kind, which picks the worker of a shardq.Client that runs it
	// (shardq.Args.Kind); kept with the task like its headers. UTF-8, at most MaxKindBytes.
	// Defaults to none.
	Kind string
}

// Producer schedules tasks. It is safe for concurrent use.
type Producer struct {
	cfg     Config
	state   *sessionstate.State // the session's settings cache, toucher and wake-up bus
	store   store.Store
	lockers sync.Map // name -> *locking.Locker, for Cancel and Reschedule
	turns   turns    // their turns at a partition's lock
	signals *signal.Toucher
	writes  *combine.Writer[store.Mutation]
	cluster *clustertime.Clock
	spread  *spread.Counter // which shard a new task goes to

	tasks *tasklookup.Finder // finds the tasks Cancel and Reschedule move, and holders of keys

	schedule ScheduleFunc // scheduleTasks, wrapped in Config.Middleware when there is one

	afterWrite func(error) error // tests only: what a task batch's write returned, and what to make of it
	failRecord func() error      // tests only: fails a cancel's index write when it returns an error
	// tests only: what a cancel's removal returned, and what to make of it
	afterRemove func(bool, error) (bool, error)
}

// New returns a Producer writing through session, whose keyspace holds shardq's tables.
func New(d *shardqtype.Driver, cfg Config) (*Producer, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if cfg.MaxPayloadBytes < 0 || cfg.MaxPayloadBytes > MaxPayloadLimit {
		return nil, defaults.Invalid("Config.MaxPayloadBytes", "%d is not in [1, %d]", cfg.MaxPayloadBytes, MaxPayloadLimit)
	}
	if err := defaults.NonNegative(&cfg.WritesInFlight, DefaultWritesInFlight, "Config.WritesInFlight"); err != nil {
		return nil, err
	}
	if err := defaults.NonNegative(&cfg.WriteAttempts, DefaultWriteAttempts, "Config.WriteAttempts"); err != nil {
		return nil, err
	}
	if err := defaults.NonNegative(&cfg.ShardRate, DefaultShardRate, "Config.ShardRate"); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st := sessionstate.For(d, cfg.Logger)
	cluster := st.ClusterFor(cfg.Clock)
	if cfg.Clock == nil {
		cfg.Clock = cluster
	}
	p := &Producer{cfg: cfg, state: st, store: st.Store, signals: st.Signals,
		tasks:  tasklookup.New(st.Store, cfg.Clock, st.Queue),
		writes: combine.New(st.Store.Tasks().Write, taskrow.MaxBatchRows, taskrow.MaxBatchBytes), cluster: cluster,
		spread: spread.New(cfg.ShardRate)}
	p.schedule = p.scheduleTasks
	if cfg.Middleware != nil {
		p.schedule = cfg.Middleware(p.schedule)
	}
	return p, nil
}

// ScheduleTask writes one task and returns its ID.
func (p *Producer) ScheduleTask(ctx context.Context, task Task) (uuid.UUID, error) {
	ids, err := p.ScheduleTasks(ctx, []Task{task})
	if err != nil {
		var perr *PartialError
		if errors.As(err, &perr) {
			return uuid.Nil, perr.Err
		}
		return uuid.Nil, err
	}
	return ids[0], nil
}

// PartialError reports a ScheduleTasks call whose writes partly failed: the tasks at
// Failed (indexes into the call's slice) may or may not have been written (their write
// failed, or timed out Config.WriteAttempts times); all others were. Scheduling the
// failed ones again can duplicate them, never lose them.
type PartialError struct {
	Failed []int
	Err    error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("producer: %d task(s) not confirmed written: %v", len(e.Failed), e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// ScheduleTasks writes tasks, one batch per partition, and returns their IDs in order.
// Every task is validated first: if any is invalid, nothing is written and the error
// names it. If some writes fail, the error is a *PartialError.
func (p *Producer) ScheduleTasks(ctx context.Context, tasks []Task) ([]uuid.UUID, error) {
	return p.schedule(ctx, tasks)
}

// scheduleTasks is ScheduleTasks, without Config.Middleware.
func (p *Producer) scheduleTasks(ctx context.Context, tasks []Task) ([]uuid.UUID, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	queues := make([]shardqtype.QueueConfig, len(tasks))
	for i, t := range tasks {
		q, err := p.queue(ctx, t.Queue)
		if err != nil {
			return nil, fmt.Errorf("tasks[%d]: %w", i, err)
		}
		queues[i] = q
	}
	// "Now" is taken once the settings are loaded, right before the write: a row's ID is
	// never earlier than the time it is written, which consumers' read floors rest on.
	now := p.cfg.Clock.Now()
	rows := make([]taskrow.Row, len(tasks))
	ids := make([]uuid.UUID, len(tasks))
	late := pastDueOrder(tasks, now)
	for i, t := range tasks {
		var err error
		if rows[i], err = p.row(queues[i], t, now.Add(late[i]), fmt.Sprintf("tasks[%d]", i)); err != nil {
			return nil, err
		}
		ids[i] = rows[i].TaskID
	}
	if err := checkKeys(tasks); err != nil {
		return nil, err
	}
	ctx, cancel, err := p.claimKeys(ctx, tasks, rows, now)
	if err != nil {
		return nil, err
	}
	defer cancel()
	now = p.placeKeyedAgain(queues, tasks, rows, late, now)

	// A task without a key is found at its first place by its ID (see internal/tasklookup): only keyed
	// tasks need an index entry before their first move, to find them by key.
	var index []taskindex.Write
	var indexed []int
	for i, t := range tasks {
		if t.Key != "" {
			index = append(index, scheduledEntry(t, rows[i], now))
			indexed = append(indexed, i)
		}
	}
	var indexFailed []int
	var indexErr error
	indexDone := make(chan struct{})
	if len(index) == 0 {
		close(indexDone)
	} else {
		go func() {
			defer close(indexDone)
			var failed []int
			failed, indexErr = p.store.Index().Write(ctx, index, p.cfg.WritesInFlight)
			for _, f := range failed {
				indexFailed = append(indexFailed, indexed[f])
			}
		}()
	}
	batches := taskrow.Group(rows)
	failed := make([][]int, len(batches))
	ts := p.cluster.Stamp(now)
	err = fanout.Each(len(batches), p.cfg.WritesInFlight, func(i int) error {
		inserts := make([]store.Mutation, len(batches[i]))
		bytes := 0
		for j, idx := range batches[i] {
			inserts[j] = store.Mutation{Op: store.Insert, Row: rows[idx], Stamp: ts}
			bytes += rows[idx].Size()
		}
		err := p.write(ctx, rows[batches[i][0]].Key, inserts, bytes)
		if err != nil {
			failed[i] = batches[i]
			return fmt.Errorf("writing %d task(s) to %s: %w", len(batches[i]), rows[batches[i][0]].Key, err)
		}
		return nil
	})
	<-indexDone
	// Every row's cell is touched whatever the outcome: rows reported written, and rows
	// whose write failed, which may have applied all the same. A row that lands after the
	// last touch of its cell (only the one that announced it came before the write) is
	// read only when the ring comes back to it, or never once floors pass it.
	p.wake(ctx, tasks, rows, queues)
	if err = errors.Join(err, indexErr); err != nil {
		// A task whose index entry failed is written but could not be found by ID:
		// reported like one whose write failed.
		perr := &PartialError{Err: err}
		seen := map[int]bool{}
		for _, f := range append(slices.Concat(failed...), indexFailed...) {
			if !seen[f] {
				seen[f] = true
				perr.Failed = append(perr.Failed, f)
			}
		}
		slices.Sort(perr.Failed)
		return ids, perr
	}
	p.cfg.Logger.DebugContext(ctx, "scheduled tasks", "tasks", len(tasks), "batches", len(batches))
	return ids, nil
}

// write writes one partition's rows, sending them again, after a pause, while the write
// times out, up to Config.WriteAttempts times in all.
func (p *Producer) write(ctx context.Context, key string, inserts []store.Mutation, bytes int) error {
	for attempt := 1; ; attempt++ {
		err := p.writes.Write(ctx, key, inserts, bytes)
		if p.afterWrite != nil {
			err = p.afterWrite(err)
		}
		if err == nil || attempt >= p.cfg.WriteAttempts || !driver.TimedOut(err) || ctx.Err() != nil {
			return err
		}
		p.cfg.Logger.DebugContext(ctx, "task write timed out; sending it again",
			"partition_key", key, "attempt", attempt, "error", err)
		pause := time.NewTimer(time.Duration(attempt) * writeRetryPause)
		select {
		case <-ctx.Done():
			pause.Stop()
			return err
		case <-pause.C:
		}
	}
}

// writeRetryPause is the pause before a timed-out write's second attempt, growing by as
// much before each next one: time for a busy node to catch up.
const writeRetryPause = 100 * time.Millisecond

// placeKeyedAgain places keyed rows due by now again after their keys' claims, whose
// lightweight transactions take round trips: written at the place taken before them, such
// a row lands that much later than its ID time, below the floors of consumers that read
// its partition meanwhile. A keyed task's index entry names its row, so the row's ID may
// differ from the task's. It returns the time the rows are now placed by.
func (p *Producer) placeKeyedAgain(queues []shardqtype.QueueConfig, tasks []Task, rows []taskrow.Row, late []time.Duration, before time.Time) time.Time {
	now := p.cfg.Clock.Now()
	if !now.After(before) {
		return before
	}
	for i, t := range tasks {
		place := now.Add(late[i])
		if t.Key == "" || !shard.IDTime(rows[i].ID).Before(place) {
			continue
		}
		l := p.state.Place(queues[i], place, now)
		rows[i].ID = shard.NewID(place)
		rows[i].Key = l.Key(l.Bucket(place), l.ShardFor(rows[i].TaskID))
	}
	return now
}

// wake wakes idle workers: those of other processes through the signal cells of the
// partitions written, then those of this process through the in-process bus, which must
// come second: an idle consumer passes a partition whose cell shows no touch in its lap.
// It outlives ctx, whose end may be what failed the write: the rows may have applied all
// the same.
func (p *Producer) wake(ctx context.Context, tasks []Task, rows []taskrow.Row, queues []shardqtype.QueueConfig) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signal.TouchTimeout)
	defer cancel()
	earliest := map[string]time.Time{}
	var touches signal.Touches
	for i, t := range tasks {
		if e, ok := earliest[t.Queue]; !ok || rows[i].DueAt.Before(e) {
			earliest[t.Queue] = rows[i].DueAt
		}
		touches.Add(p.state.LayoutOf(queues[i], rows[i].Key), rows[i].ID, rows[i].TaskID)
	}
	if err := p.signals.Touch(ctx, &touches); err != nil {
		// The tasks are written; the session's toucher retries the touch until it
		// applies (signal.Toucher): idle workers pass a partition whose cell shows none.
		p.cfg.Logger.WarnContext(ctx, "touching wake-up signals", "error", err)
	}
	for q, due := range earliest {
		p.state.Bus.Wake(q, due)
	}
}

// pastDueOrder spaces the tasks of one call that are due in the past (or now) 100 ns
// apart, the last at now, earliest due first: they are all due now and keep their
// order. A thousand tasks reach 100 µs back, far inside the MaxClockSkew that read
// floors allow for.
func pastDueOrder(tasks []Task, now time.Time) []time.Duration {
	var idx []int
	for i, t := range tasks {
		if !t.DueAt.After(now) {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return tasks[a].DueAt.Compare(tasks[b].DueAt) })
	out := make([]time.Duration, len(tasks))
	for rank, i := range idx {
		out[i] = -time.Duration(len(idx)-1-rank) * 100 * time.Nanosecond
	}
	return out
}

// row validates t and places it.
func (p *Producer) row(q shardqtype.QueueConfig, t Task, now time.Time, name string) (taskrow.Row, error) {
	due := t.DueAt
	if due.IsZero() {
		due = now
	}
	switch {
	case due.Before(shard.MinIDTime) || due.After(shard.MaxIDTime):
		return taskrow.Row{}, defaults.Invalid(name+".DueAt", "%v is outside [%v, %v]", t.DueAt, shard.MinIDTime.UTC(), shard.MaxIDTime)
	case due.After(now.Add(MaxDueAhead)):
		return taskrow.Row{}, defaults.Invalid(name+".DueAt", "%v is more than MaxDueAhead (%v) after now", t.DueAt, MaxDueAhead)
	case t.Priority < shardqtype.MinPriority || t.Priority > shardqtype.MaxPriority:
		return taskrow.Row{}, defaults.Invalid(name+".Priority", "%d is not in [%d, %d]", t.Priority, shardqtype.MinPriority, shardqtype.MaxPriority)
	}
	headers, err := checkHeaders(name+".Headers", t.Headers)
	if err != nil {
		return taskrow.Row{}, err
	}
	if len(t.Kind) > MaxKindBytes || !utf8.ValidString(t.Kind) {
		return taskrow.Row{}, defaults.Invalid(name+".Kind", "%q is not UTF-8 of at most %d bytes", t.Kind, MaxKindBytes)
	}
	if len(t.Payload)+headers > p.cfg.MaxPayloadBytes {
		reason := fmt.Sprintf("%d bytes is over the %d allowed", len(t.Payload), p.cfg.MaxPayloadBytes)
		if headers > 0 {
			reason = fmt.Sprintf("%d bytes and %d of headers are over the %d allowed", len(t.Payload), headers, p.cfg.MaxPayloadBytes)
		}
		return taskrow.Row{}, &shardqtype.ValidationError{Field: name + ".Payload", Reason: reason, Err: ErrPayloadTooLarge}
	}
	timeout := t.Timeout
	if timeout == 0 {
		timeout = q.DefaultTimeout
	}
	if err := q.ValidateTimeout(name+".Timeout", timeout); err != nil {
		return taskrow.Row{}, err
	}
	// A task due in the past is due now: its row becomes visible at the time it is
	// written, in the bucket consumers are reading, and takes its place among due tasks
	// by that time. DueAt keeps the time asked for.
	place := due
	if place.Before(now) {
		place = now
	}
	l := p.state.Place(q, place, now)
	id := taskid.NewIn(place, q.Name, l.ShardCount, p.spread.Shard(l.Ring(), place, now, l.ShardCount))
	gid := id
	return taskrow.Row{
		Key: l.Key(l.Bucket(place), l.ShardFor(id)), Priority: int8(t.Priority), ID: gid, TaskID: gid,
		Payload: t.Payload, DueAt: due, Timeout: timeout, Keyed: t.Key != "", Headers: t.Headers,
		Kind: t.Kind,
	}, nil
}

// checkHeaders validates headers h of field and returns their size (taskrow.HeaderBytes).
func checkHeaders(field string, h map[string]string) (int, error) {
	for k, v := range h {
		switch {
		case k == "":
			return 0, defaults.Invalid(field, "a key is empty")
		case !utf8.ValidString(k):
			return 0, defaults.Invalid(field, "key %q is not UTF-8", k)
		case !utf8.ValidString(v):
			return 0, defaults.Invalid(field, "the value of %q is not UTF-8", k)
		}
	}
	n := taskrow.HeaderBytes(h)
	if n > MaxHeaderBytes {
		return 0, &shardqtype.ValidationError{Field: field, Reason: fmt.Sprintf("%d bytes is over the %d allowed", n, MaxHeaderBytes),
			Err: ErrHeadersTooLarge}
	}
	return n, nil
}

// Every call that writes asks for its queue first, so this is where the cluster's clock
// must have been measured before anything is stamped by it (shardqtype.ErrClockUnmeasured): a host ahead of the cluster by more than
// clustertime.WriteLag would stamp rows that a later delete cannot shadow (a Reschedule's
// row outliving the Cancel that followed it, say). It is also where the queue's layouts
// are read again once shardqtype.SettingsRefresh old, which rows are placed by: writing under
// an older history could put a row into a layout consumers no longer read.
func (p *Producer) queue(ctx context.Context, name string) (shardqtype.QueueConfig, error) {
	if err := p.cluster.Ready(ctx); err != nil {
		return shardqtype.QueueConfig{}, err
	}
	q, err := p.state.Queue(ctx, name)
	if err != nil {
		return q, err
	}
	if _, err := p.state.Layouts(ctx, name); err != nil {
		return shardqtype.QueueConfig{}, err
	}
	return q, nil
}
