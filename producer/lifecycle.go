package producer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// maxMoves bounds how often Cancel and Reschedule look again for a task that moved under
// them (a consumer took it, or another call moved it).
const maxMoves = 8

// scheduledEntry is the index entry of a task just scheduled as row r.
func scheduledEntry(t Task, r taskrow.Row, now time.Time) taskindex.Write {
	id := uuid.UUID(r.TaskID)
	return taskindex.Write{
		Entry: taskindex.Entry{TaskID: id, Queue: t.Queue, Key: t.Key, State: taskindex.Scheduled,
			Row: loc(r), DueAt: r.DueAt, Token: r.Token},
		Stamp: taskindex.Stamp(id, r.Token, 0),
		TTL:   taskindex.TTL(now, shard.IDTime(uuid.UUID(r.ID))),
	}
}

func loc(r taskrow.Row) taskindex.Loc {
	return taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID}
}

// located is where a task is: its index entry, confirmed against the tasks table.
type located struct {
	entry taskindex.Entry
	stamp int64           // the entry's write timestamp
	state taskindex.State // the state of the row found, or the entry's final state
	row   taskrow.Row     // the task's row, for the pending and in-flight states
	// stray is the row the entry names as the task's next place, found beside row: a
	// consumer's swap or a Reschedule wrote it ahead of a move out of row that never
	// applied (see dropStray), or a holder's lease move ahead of its delete of row, which
	// may still apply (see leaseMove).
	stray *taskrow.Row
}

// leaseMove reports whether l.stray is the new marker of a lease move (Extend or Retry):
// its holder deletes l.row with a lightweight transaction that no lock fences, so the
// move may still apply, and l.stray must outlive l.row (see swap).
func (l located) leaseMove() bool { return l.stray != nil && l.entry.PrevState == taskindex.InFlight }

// locate finds task id: the row its index entry names now, or, when that move has not
// happened (or a crash cut it short), the row it names as the previous place.
func (p *Producer) locate(ctx context.Context, id uuid.UUID) (located, error) {
	if err := checkID("id", id); err != nil {
		return located{}, err
	}
	e, stamp, err := p.store.Index().Read(ctx, id)
	switch {
	case errors.Is(err, taskindex.ErrNotFound):
		return p.home(ctx, id)
	case err != nil:
		return located{}, fmt.Errorf("producer: %w", err)
	case e.State == taskindex.Dead || e.State == taskindex.Completed || e.State == taskindex.Cancelled:
		return located{entry: e, stamp: stamp, state: e.State}, nil
	}
	// The previous place first: if it is still there, the move the entry announces has
	// not happened (or its process died before finishing it), and the state is the one
	// before.
	for i, c := range []struct {
		state taskindex.State
		at    taskindex.Loc
	}{{e.PrevState, e.Prev}, {e.State, e.Row}} {
		if c.at.Key == "" {
			continue
		}
		r, ok, err := p.readRow(ctx, c.at)
		if err != nil {
			return located{}, err
		}
		if !ok {
			continue
		}
		l := located{entry: e, stamp: stamp, state: c.state, row: r}
		if i == 0 && e.Row.Key != "" {
			stray, ok, err := p.readRow(ctx, e.Row)
			if err != nil {
				return located{}, err
			}
			if ok {
				l.stray = &stray
			}
		}
		return l, nil
	}
	return located{}, fmt.Errorf("%w: %s", shardq.ErrTaskNotFound, id)
}

// home finds a task that has not moved since it was scheduled without a key, and so has
// no index entry: its row is where its ID puts it, in a queue whose hint the ID carries.
func (p *Producer) home(ctx context.Context, id uuid.UUID) (located, error) {
	names, err := p.queuesHinted(ctx, shard.QueueHint(id))
	if err != nil {
		return located{}, err
	}
	for _, name := range names {
		q, err := p.queue(ctx, name)
		if err != nil {
			return located{}, err
		}
		lay := q.Layout()
		key := lay.Key(lay.Bucket(shard.IDTime(id)), lay.ShardFor(id))
		r, ok, err := p.store.Tasks().Find(ctx, key, allPriorities, gocql.UUID(id))
		if err != nil {
			return located{}, fmt.Errorf("producer: reading %s: %w", key, err)
		}
		if ok && r.TaskID == gocql.UUID(id) {
			e := taskindex.Entry{TaskID: id, Queue: name, State: taskindex.Scheduled, Row: loc(r), DueAt: r.DueAt}
			return located{entry: e, stamp: taskindex.Stamp(id, 0, 0), state: taskindex.Scheduled, row: r}, nil
		}
	}
	return located{}, fmt.Errorf("%w: %s", shardq.ErrTaskNotFound, id)
}

var allPriorities = func() []int8 {
	var ps []int8
	for p := shardq.MinPriority; p <= shardq.MaxPriority; p++ {
		ps = append(ps, int8(p))
	}
	return ps
}()

// queuesHinted returns the queues whose task IDs carry hint, reading the queue names
// again when none does (a queue made since).
func (p *Producer) queuesHinted(ctx context.Context, hint uint16) ([]string, error) {
	p.hintsMu.Lock()
	defer p.hintsMu.Unlock()
	if names, ok := p.hints[hint]; ok {
		return names, nil
	}
	names, err := p.store.Queues().Names(ctx)
	if err != nil {
		return nil, fmt.Errorf("producer: listing queues: %w", err)
	}
	hints := map[uint16][]string{}
	for _, name := range names {
		h := shard.HintOf(name)
		hints[h] = append(hints[h], name)
	}
	p.hints = hints
	return hints[hint], nil
}

func (p *Producer) readRow(ctx context.Context, at taskindex.Loc) (taskrow.Row, bool, error) {
	r, ok, err := p.store.Tasks().Read(ctx, at.Key, at.Priority, at.ID)
	if err != nil {
		return taskrow.Row{}, false, fmt.Errorf("producer: reading %s: %w", at.Key, err)
	}
	return r, ok, nil
}

// Get reports the state of task id, or returns shardq.ErrTaskNotFound. A task scheduled
// by a call that returned reports TaskScheduled (or a later state); an acked one reports
// TaskCompleted within its queue's CompletedRetention, else it is not found.
//
// The state may lag a crash by one step: a consumer that dies between leasing a task and
// recording the lease leaves the task reported as pending until its lease would have
// ended, and one that dies between acking and recording the ack leaves it not found
// rather than completed.
func (p *Producer) Get(ctx context.Context, id uuid.UUID) (*shardq.TaskInfo, error) {
	l, err := p.locate(ctx, id)
	if err != nil {
		return nil, err
	}
	switch l.state {
	case taskindex.Cancelled:
		return nil, fmt.Errorf("%w: %s was cancelled", shardq.ErrTaskNotFound, id)
	case taskindex.Completed:
		// Kept at least taskindex.Finished for key claims; reported for the retention.
		q, err := p.queue(ctx, l.entry.Queue)
		if err != nil {
			return nil, err
		}
		if !p.cfg.Clock.Now().Before(l.entry.DoneAt.Add(q.CompletedRetention)) {
			return nil, fmt.Errorf("%w: %s completed", shardq.ErrTaskNotFound, id)
		}
	}
	return p.info(l), nil
}

func (p *Producer) info(l located) *shardq.TaskInfo {
	e := l.entry
	info := &shardq.TaskInfo{ID: e.TaskID, Queue: e.Queue, Key: e.Key, DueAt: e.DueAt, Attempt: e.Attempt, Token: e.Token}
	switch l.state {
	case taskindex.Dead, taskindex.Completed, taskindex.Cancelled:
		info.State = shardq.TaskDead
		if l.state != taskindex.Dead {
			info.State = shardq.TaskCompleted
		}
		info.LastError, info.FinishedAt = e.Error, e.DoneAt
		return info
	}
	r := l.row
	info.Priority, info.Attempt, info.Token, info.Payload, info.DueAt = int(r.Priority), r.Attempt, r.Token, r.Payload, r.DueAt
	visible := shard.IDTime(uuid.UUID(r.ID))
	info.Timeout, info.VisibleAt, info.PartitionKey = r.Timeout, visible, r.Key
	switch {
	case l.state == taskindex.Scheduled:
		info.State = shardq.TaskScheduled
	case l.state == taskindex.InFlight && visible.After(p.cfg.Clock.Now()):
		info.State, info.Deadline = shardq.TaskInFlight, visible
	default:
		// Retried, or its lease ran out: due again when its row becomes visible.
		info.State, info.DueAt = shardq.TaskRetrying, visible
	}
	return info
}

// GetByKey reports the state of the task that holds key in queue, as Get.
func (p *Producer) GetByKey(ctx context.Context, queue, key string) (*shardq.TaskInfo, error) {
	id, err := p.keyHolder(ctx, queue, key)
	if err != nil {
		return nil, err
	}
	return p.Get(ctx, id)
}

// CancelOptions tunes Cancel.
type CancelOptions struct {
	// AfterLease cancels a task in flight too: its current delivery runs on, but it is
	// never delivered again (its holder's ack, retry or extension then fails with
	// consumer.ErrLeaseLost). Without it, cancelling a task in flight fails with a
	// *shardq.TaskInFlightError. Defaults to false.
	AfterLease bool
}

// Cancel removes a pending or retrying task so that it is never delivered again. It
// returns shardq.ErrTaskNotFound for a task that completed, died or does not exist, a
// *shardq.TaskInFlightError for one a consumer holds, unless opts.AfterLease is set, and
// lock.ErrLockHeld when consumers kept its partition locked for three lock TTLs: the call
// can be made again.
func (p *Producer) Cancel(ctx context.Context, id uuid.UUID, opts CancelOptions) error {
	var unsettled error
	for range maxMoves {
		l, err := p.locate(ctx, id)
		switch {
		case errors.Is(err, shardq.ErrTaskNotFound) && unsettled != nil:
			return nil // our removal applied after all, or the task's holder acked it meanwhile
		case err != nil:
			return err
		case l.state == taskindex.Dead || l.state == taskindex.Completed || l.state == taskindex.Cancelled:
			return fmt.Errorf("%w: %s is done", shardq.ErrTaskNotFound, id)
		}
		if info := p.info(l); info.State == shardq.TaskInFlight && !opts.AfterLease {
			return &shardq.TaskInFlightError{ID: id, Token: info.Token, Deadline: info.Deadline}
		}
		q, err := p.queue(ctx, l.entry.Queue)
		if err != nil {
			return err
		}
		if l.stray != nil && !l.leaseMove() {
			if err := p.dropStray(ctx, q, l); err != nil {
				return fmt.Errorf("producer: cancelling %s: %w", id, err)
			}
			continue // look again, without it
		}
		removed, err := p.remove(ctx, q, l.row, l.stray)
		switch {
		case errors.Is(err, lwt.ErrOutcomeUnknown):
			unsettled = err
			continue
		case err != nil:
			return fmt.Errorf("producer: cancelling %s: %w", id, err)
		case !removed:
			continue // it moved under us: look again
		}
		// A cancelled task is not found; only its key's next claimer needs to see it ended.
		done := taskindex.Write{Entry: taskindex.Entry{TaskID: id, Queue: l.entry.Queue, State: taskindex.Cancelled,
			DueAt: l.row.DueAt, Attempt: l.row.Attempt, Token: l.row.Token, DoneAt: p.cfg.Clock.Now()},
			Stamp: taskindex.Stamp(id, l.row.Token, taskindex.Final), TTL: taskindex.Finished,
			Replace: l.row.Keyed, Delete: !l.row.Keyed}
		if _, err := p.store.Index().Write(ctx, []taskindex.Write{done}, 1); err != nil {
			// The row is gone, so readers find the entry's rows gone: not found.
			p.cfg.Logger.WarnContext(ctx, "recording a cancel in the index", "task_id", id, "error", err)
		}
		return nil
	}
	if unsettled != nil {
		return fmt.Errorf("producer: cancelling %s: %w", id, unsettled)
	}
	return fmt.Errorf("producer: cancelling %s: it kept moving (%d tries)", id, maxMoves)
}

// CancelByKey cancels the task that holds key in queue, as Cancel.
func (p *Producer) CancelByKey(ctx context.Context, queue, key string, opts CancelOptions) error {
	id, err := p.keyHolder(ctx, queue, key)
	if err != nil {
		return err
	}
	return p.Cancel(ctx, id, opts)
}

// RescheduleOptions says what Reschedule changes; zero fields keep the task's own.
type RescheduleOptions struct {
	// DueAt is the new due time; a past time means now. Defaults to the current one.
	DueAt time.Time
	// Priority is the new priority. Defaults to the current one (nil).
	Priority *int
}

// Reschedule moves a pending or retrying task to a new due time, priority or both. The
// move is atomic with respect to consumers: the task is delivered once, at its new time.
// It returns a *shardq.TaskInFlightError for a task a consumer holds,
// shardq.ErrTaskNotFound for one that completed, died or does not exist, and
// lock.ErrLockHeld, the task unchanged, when consumers kept its partition locked for three
// lock TTLs.
func (p *Producer) Reschedule(ctx context.Context, id uuid.UUID, opts RescheduleOptions) error {
	if opts.Priority != nil && (*opts.Priority < shardq.MinPriority || *opts.Priority > shardq.MaxPriority) {
		return shardq.Invalid("opts.Priority", "%d is not in [%d, %d]", *opts.Priority, shardq.MinPriority, shardq.MaxPriority)
	}
	if !opts.DueAt.IsZero() && (opts.DueAt.Before(shard.MinIDTime) || opts.DueAt.After(shard.MaxIDTime)) {
		return shardq.Invalid("opts.DueAt", "%v is outside [%v, %v]", opts.DueAt, shard.MinIDTime.UTC(), shard.MaxIDTime)
	}
	for range maxMoves {
		l, err := p.locate(ctx, id)
		if err != nil {
			return err
		}
		if l.state == taskindex.Dead || l.state == taskindex.Completed || l.state == taskindex.Cancelled {
			return fmt.Errorf("%w: %s is done", shardq.ErrTaskNotFound, id)
		}
		info := p.info(l)
		if info.State == shardq.TaskInFlight {
			return &shardq.TaskInFlightError{ID: id, Token: info.Token, Deadline: info.Deadline}
		}
		q, err := p.queue(ctx, l.entry.Queue)
		if err != nil {
			return err
		}
		// Before the index entry of the move stops naming it. A lease move's marker goes
		// with the move instead: a crash in between leaves it, a duplicate.
		if l.stray != nil && !l.leaseMove() {
			if err := p.dropStray(ctx, q, l); err != nil {
				return fmt.Errorf("producer: rescheduling %s: %w", id, err)
			}
			continue // look again, without it
		}
		// Where the task goes by the time now, which names the partitions to lock; made
		// again once they are held.
		now := p.cfg.Clock.Now()
		next, place := p.rescheduled(q, l, info, opts, now)
		if l.row.Keyed && l.entry.Key != "" {
			// Before the move: a claim longer than needed is harmless, one shorter lets a
			// second task take the key while this one still waits.
			err := p.keepClaim(ctx, q.Name, l.entry.Key, id, taskindex.TTL(now, place))
			var dup *DuplicateError
			switch {
			case errors.As(err, &dup):
				// Another live task took the key after this one's claim ran out (as claims
				// of earlier versions could): there is no claim of ours left to keep.
				p.cfg.Logger.WarnContext(ctx, "rescheduling a task whose key another task holds",
					"task_id", id, "key", l.entry.Key, "holder", dup.ExistingID)
			case err != nil:
				return fmt.Errorf("producer: rescheduling %s: %w", id, err)
			}
		}
		moved, err := p.reschedule(ctx, q, l, info, opts, next.Key)
		switch {
		case err != nil:
			return fmt.Errorf("producer: rescheduling %s: %w", id, err)
		case moved:
			return nil
		}
	}
	return fmt.Errorf("producer: rescheduling %s: it kept moving (%d tries)", id, maxMoves)
}

// RescheduleByKey reschedules the task that holds key in queue, as Reschedule.
func (p *Producer) RescheduleByKey(ctx context.Context, queue, key string, opts RescheduleOptions) error {
	id, err := p.keyHolder(ctx, queue, key)
	if err != nil {
		return err
	}
	return p.Reschedule(ctx, id, opts)
}

// rescheduled is the row the task of l moves to when rescheduled by opts at now, and
// the time it becomes visible.
func (p *Producer) rescheduled(q shardq.QueueConfig, l located, info *shardq.TaskInfo, opts RescheduleOptions, now time.Time) (taskrow.Row, time.Time) {
	next := l.row
	due := opts.DueAt
	if due.IsZero() {
		due = info.DueAt
	}
	if l.state == taskindex.Scheduled {
		next.DueAt = due // a retrying row keeps the due time first asked for
	}
	if opts.Priority != nil {
		next.Priority = int8(*opts.Priority)
	}
	place := due
	if place.Before(now) {
		place = now
	}
	next.ID = gocql.UUID(shard.NewID(place))
	lay := q.Layout()
	next.Key = lay.Key(lay.Bucket(place), lay.ShardFor(uuid.UUID(next.TaskID)))
	next.Retrying = l.state != taskindex.Scheduled // a lapsed lease is pending again too
	return next, place
}

// reschedule moves the task of l as opts say into partition dst, under the locks of
// its partition and dst, taking along l.stray, a lease move's new marker when there is
// one (see swap). It reports false when the task moved under it, or when the time the
// lock wait took sends it to another partition than dst: the caller looks again.
func (p *Producer) reschedule(ctx context.Context, q shardq.QueueConfig, l located, info *shardq.TaskInfo, opts RescheduleOptions, dst string) (bool, error) {
	m, err := p.lockMove(ctx, q, l.row.Key, dst, l.stray)
	if err != nil {
		return false, err
	}
	defer m.release(ctx)
	// "Now" once the locks are held, for the row's ID: a row written later than its ID
	// says (by more than consumers' MaxClockSkew) lands below their read floors.
	now := p.cfg.Clock.Now()
	next, place := p.rescheduled(q, l, info, opts, now)
	if next.Key != dst {
		return false, nil
	}
	state := l.state
	if state == taskindex.InFlight {
		state = taskindex.Retrying // its lease ran out: pending again
	}
	entry := taskindex.Entry{TaskID: info.ID, Queue: q.Name, State: state, Row: loc(next), PrevState: state,
		Prev: loc(l.row), DueAt: next.DueAt, Attempt: next.Attempt, Token: next.Token}
	ttl := taskindex.TTL(now, place)
	if _, err := p.store.Index().Write(ctx, []taskindex.Write{{Entry: entry, Stamp: l.stamp + 1, TTL: ttl}}, 1); err != nil {
		return false, err
	}
	moved, err := p.swap(ctx, m, l.row, &next, l.stray)
	if err != nil || !moved {
		return false, err
	}
	// Confirm the move, so that a racing call's entry (same timestamp, lost move)
	// cannot stand.
	entry.Prev, entry.PrevState = taskindex.Loc{}, 0
	if _, err := p.store.Index().Write(ctx, []taskindex.Write{{Entry: entry, Stamp: l.stamp + 2, TTL: ttl}}, 1); err != nil {
		p.cfg.Logger.WarnContext(ctx, "confirming a reschedule in the index", "task_id", info.ID, "error", err)
	}
	var touches signal.Touches
	touches.Add(q.Layout(), uuid.UUID(next.ID), uuid.UUID(next.TaskID))
	if err := p.signals.Touch(ctx, &touches); err != nil {
		p.cfg.Logger.WarnContext(ctx, "touching wake-up signals", "error", err)
	}
	p.state.Bus.Wake(q.Name, place) // after the touch, as producer.wake explains
	return true, nil
}

// remove deletes the pending row from, fenced against consumers, and stray, a lease
// move's new marker, when given (see swap): it reports false when from was gone (a
// consumer took it, or another call moved it).
func (p *Producer) remove(ctx context.Context, q shardq.QueueConfig, from taskrow.Row, stray *taskrow.Row) (bool, error) {
	if from.Attempt > 0 && stray == nil {
		// Consumers take such rows only if they still exist, so a condition is fence enough.
		return lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
			return p.store.Tasks().DeleteIfExists(ctx, from)
		}, func(rctx context.Context, cause error) (bool, error) {
			return false, fmt.Errorf("%w: deleting %s: %w", lwt.ErrOutcomeUnknown, from.Key, cause)
		})
	}
	m, err := p.lockMove(ctx, q, from.Key, from.Key, stray)
	if err != nil {
		return false, err
	}
	defer m.release(ctx)
	return p.swap(ctx, m, from, nil, stray)
}

// moveLocks is what a move holds: its turns at the partitions it touches and their locks.
type moveLocks struct {
	p      *Producer
	src    *locking.Lock   // the source partition's; nil once a batch released it
	others []*locking.Lock // those of the destination and the stray's partition, when other ones
	turns  []func()
}

// lockMove takes the turns and the locks of partitions from and to and, when stray is
// given, stray's (one to three partitions), in key order: one order for every caller, so
// none waits on another's next lock.
func (p *Producer) lockMove(ctx context.Context, q shardq.QueueConfig, from, to string, stray *taskrow.Row) (*moveLocks, error) {
	keys := []string{from, to}
	if stray != nil {
		keys = append(keys, stray.Key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	m := &moveLocks{p: p}
	for _, k := range keys {
		done, err := p.turns.take(ctx, k)
		if err != nil {
			m.release(ctx)
			return nil, err
		}
		m.turns = append(m.turns, done)
	}
	locks, err := p.lockKeys(ctx, q, keys)
	if err != nil {
		m.release(ctx)
		return nil, err
	}
	for i, k := range keys {
		if k == from {
			m.src = locks[i]
		} else {
			m.others = append(m.others, locks[i])
		}
	}
	return m, nil
}

// release frees the locks still held, then the turns.
func (m *moveLocks) release(ctx context.Context) {
	for _, lk := range append([]*locking.Lock{m.src}, m.others...) {
		if lk != nil {
			m.p.releaseLock(ctx, lk)
		}
	}
	m.src, m.others = nil, nil
	for _, done := range m.turns {
		done()
	}
	m.turns = nil
}

func (p *Producer) releaseLock(ctx context.Context, lk *locking.Lock) {
	if err := lk.Release(ctx); err != nil && !errors.Is(err, locking.ErrLockLost) {
		p.cfg.Logger.WarnContext(ctx, "releasing a lock", "partition_key", lk.Key(), "error", err)
	}
}

// swap deletes the pending row from and, when to is given, writes it in its place,
// under m's locks: it reports false when from was gone (a consumer took it, or another
// call moved it). A row never delivered is deleted only under its partition's lock,
// because consumers delete such rows without a condition; to's partition is locked too
// while to exists beside from, so no consumer can take both. The batch releases m's
// source lock.
//
// stray, when given, is the new marker of a lease move out of from (located.leaseMove)
// whose holder has not deleted from: it died, or it is slow. Its delete of from is not
// fenced by any lock, so deleting stray first could leave a live holder's task nowhere.
// Once our batch has deleted from, that delete cannot apply (a live holder drops stray
// and gets ErrLeaseLost), so stray is not the task and is deleted after it. m holds its
// partition's lock throughout and stray is read at SERIAL first: a consumer that took it
// before made it the task (we report false), and none takes it meanwhile. A crash after
// the batch leaves stray: a duplicate, and not a successful call.
func (p *Producer) swap(ctx context.Context, m *moveLocks, from taskrow.Row, to, stray *taskrow.Row) (bool, error) {
	tasks := p.store.Tasks()
	if stray != nil {
		there, err := tasks.Exists(ctx, *stray)
		switch {
		case err != nil:
			return false, fmt.Errorf("reading %s: %w", stray.Key, err)
		case !there:
			return false, nil // a consumer took it, or its holder's move failed: look again
		}
	}
	src := m.src
	m.src = nil // released by the batch, or below when it did not apply
	batch := []store.Mutation{{Op: store.Release, Lock: src.Ref()}, {Op: store.DeleteIfExists, Row: from}}
	apart := to != nil && to.Key != from.Key
	switch {
	case apart:
		ins := store.Mutation{Op: store.Insert, Row: *to, Stamp: p.cluster.Stamp(p.cfg.Clock.Now())}
		if err := tasks.Write(ctx, []store.Mutation{ins}); err != nil {
			p.dropRow(ctx, *to)
			p.releaseLock(ctx, src)
			return false, fmt.Errorf("writing %s: %w", to.Key, err)
		}
	case to != nil:
		batch = append(batch, store.Mutation{Op: store.Insert, Row: *to})
	}
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) { return tasks.Apply(ctx, batch) },
		func(rctx context.Context, cause error) (bool, error) {
			applied, err := src.Settle(rctx)
			if err != nil {
				return false, fmt.Errorf("%w (settling: %w)", cause, err)
			}
			return applied, nil
		})
	if apart && err == nil && !applied || apart && err != nil && lwt.Definite(err) {
		p.dropRow(ctx, *to)
	}
	if err != nil || !applied {
		p.releaseLock(ctx, src)
	}
	if err == nil && applied && stray != nil {
		if err := p.deleteStray(ctx, *stray); err != nil {
			return true, err
		}
	}
	// An unsettled outcome leaves to in place: if from is gone too, to is the task; if
	// not, the task is there twice, a duplicate but never a loss.
	return applied, err
}

// dropRow deletes a row written for a move that did not happen. We hold its partition's
// lock, so no consumer took it.
func (p *Producer) dropRow(ctx context.Context, r taskrow.Row) {
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	if err := p.store.Tasks().Write(rctx, []store.Mutation{{Op: store.Delete, Row: r}}); err != nil {
		p.cfg.Logger.WarnContext(ctx, "deleting the row of a move that did not happen; the task may run twice",
			"partition_key", r.Key, "task_id", uuid.UUID(r.TaskID), "error", err)
	}
}

// lockWait bounds how long Cancel and Reschedule wait for a partition's lock, in
// multiples of the queue's LockTTL: a holder keeps it far shorter, or it expires.
const lockWait = 3

// lockKeys takes the locks of keys (one to three, in order), waiting up to lockWait lock
// TTLs while consumers hold them. Holding some, it waits for the next only while those
// surely still hold (a lock is held more than its TTL less a second: TTLs expire on whole
// seconds), and renews them when half that time has passed: a lock that expired while its
// holder waited would let a consumer take the partition in the middle of the move. When
// the next stays held, it lets them go and starts again.
func (p *Producer) lockKeys(ctx context.Context, q shardq.QueueConfig, keys []string) ([]*locking.Lock, error) {
	locker, err := p.locker(q)
	if err != nil {
		return nil, err
	}
	give := time.Now().Add(lockWait * q.LockTTL)
	backoff := newBackoff()
	for {
		locks, err := p.lockEach(ctx, q, locker, keys, give)
		switch {
		case err == nil:
			return locks, nil
		case !errors.Is(err, locking.ErrLockHeld) && !errors.Is(err, locking.ErrLockLost):
			return nil, err
		case time.Now().After(give):
			return nil, locking.ErrLockHeld
		}
		if err := backoff.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// lockEach is one try of lockKeys: it holds all of keys' locks, or none.
func (p *Producer) lockEach(ctx context.Context, q shardq.QueueConfig, locker *locking.Locker, keys []string, give time.Time) ([]*locking.Lock, error) {
	var locks []*locking.Lock
	var since time.Time // when the try that took, or renewed, the oldest of locks started
	for _, k := range keys {
		until := give
		half := since.Add((q.LockTTL - time.Second) / 2) // half the time the locks surely hold
		if locks != nil && half.Before(until) {
			until = half
		}
		lk, at, err := p.lock(ctx, locker, k, until)
		if err == nil && locks != nil && time.Now().After(half) {
			for _, held := range locks {
				if err = held.Renew(ctx); err != nil {
					p.releaseLock(ctx, lk)
					break
				}
			}
			since = at // before the renewals
		}
		if err != nil {
			for _, held := range locks {
				p.releaseLock(ctx, held)
			}
			return nil, err
		}
		if locks == nil {
			since = at
		}
		locks = append(locks, lk)
	}
	return locks, nil
}

func (p *Producer) locker(q shardq.QueueConfig) (*locking.Locker, error) {
	if v, ok := p.lockers.Load(q.Name); ok {
		return v.(*locking.Locker), nil
	}
	l, err := locking.New(p.store.Locks(), locking.Config{TTL: q.LockTTL, Logger: p.cfg.Logger})
	if err != nil {
		return nil, err
	}
	v, _ := p.lockers.LoadOrStore(q.Name, l)
	return v.(*locking.Locker), nil
}

// lock takes key's lock, waiting while consumers hold it until until. It also returns
// when the try that took it started, from which the lock is held more than its TTL less a
// second.
func (p *Producer) lock(ctx context.Context, locker *locking.Locker, key string, until time.Time) (*locking.Lock, time.Time, error) {
	backoff := newBackoff()
	for {
		at := time.Now()
		lk, err := locker.Acquire(ctx, key)
		if !errors.Is(err, locking.ErrLockHeld) || time.Now().After(until) {
			return lk, at, err
		}
		if err := backoff.wait(ctx); err != nil {
			return nil, at, err
		}
	}
}

// backoff spaces the tries of a lock held by others: 5 ms doubling up to 200 ms,
// jittered, so that producers waiting on one partition do not retry in step.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 5 * time.Millisecond} }

func (b *backoff) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.next/2 + rand.N(b.next/2+1)):
	}
	b.next = min(2*b.next, 200*time.Millisecond)
	return nil
}

// checkID rejects what cannot be a task or dead letter ID: those are version 1 UUIDs.
func checkID(field string, id uuid.UUID) error {
	if id.Version() != 1 {
		return shardq.Invalid(field, "%s is not a task ID (a version 1 UUID)", id)
	}
	return nil
}
