package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/random"
	"github.com/shardq/shardq/shardqtype"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// maxMoves bounds how often Cancel and Reschedule look again for a task that moved under
// them (a consumer took it, or another call moved it).
const maxMoves = 8

// scheduledEntry is the index entry of a task just scheduled as row r.
func scheduledEntry(t Task, r taskrow.Row, now time.Time) taskindex.Write {
	id := r.TaskID
	return taskindex.Write{
		Entry: taskindex.Entry{TaskID: id, Queue: t.Queue, Key: t.Key, State: taskindex.Scheduled,
			Row: loc(r), DueAt: r.DueAt, Token: r.Token},
		Stamp: taskindex.Stamp(id, r.Token, 0),
		TTL:   taskindex.TTL(now, shard.IDTime(r.ID)),
	}
}

func loc(r taskrow.Row) taskindex.Loc {
	return taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID}
}

// CancelOptions tunes Cancel.
type CancelOptions struct {
	// AfterLease cancels a task in flight too: its current delivery runs on, but it is
	// never delivered again (its holder's ack, retry or extension then fails with
	// consumer.ErrLeaseLost). Without it, cancelling a task in flight fails with a
	// *shardqtype.TaskInFlightError. Defaults to false.
	AfterLease bool
}

// Cancel removes a pending or retrying task so that it is never delivered again. It
// returns shardqtype.ErrTaskNotFound for a task that completed, died or does not exist, a
// *shardqtype.TaskInFlightError for one a consumer holds, unless opts.AfterLease is set, and
// lock.ErrLockHeld when consumers kept its partition locked for three lock TTLs: the call
// can be made again. Any other error promises nothing: the task may have been removed
// (when recording the cancel in the index failed, a copy a lease fault left may still run
// it).
func (p *Producer) Cancel(ctx context.Context, id uuid.UUID, opts CancelOptions) error {
	var unsettled error
	var pending taskindex.Write // the record of a removal whose outcome stayed unknown
	for range maxMoves {
		l, err := p.tasks.Locate(ctx, id)
		switch {
		case errors.Is(err, shardqtype.ErrTaskNotFound) && unsettled != nil:
			// Our removal applied after all, or the task's holder acked it meanwhile: the
			// cancel is recorded all the same, or a copy it could not see (the marker of a
			// take whose swap failed) would run the task after we return.
			return p.recordCancel(ctx, pending)
		case err != nil:
			return err
		case l.State == taskindex.Dead || l.State == taskindex.Completed || l.State == taskindex.Cancelled:
			return fmt.Errorf("%w: %s is done", shardqtype.ErrTaskNotFound, id)
		}
		if info := p.tasks.Info(l); info.State == shardqtype.TaskInFlight && !opts.AfterLease {
			return &shardqtype.TaskInFlightError{ID: id, Token: info.Token, Deadline: info.Deadline}
		}
		q, err := p.queue(ctx, l.Entry.Queue)
		if err != nil {
			return err
		}
		if l.Stray != nil && !l.LeaseMove() {
			if err := p.dropStray(ctx, q, l); err != nil {
				return fmt.Errorf("producer: cancelling %s: %w", id, err)
			}
			continue // look again, without it
		}
		removed, err := p.remove(ctx, q, l.Row, l.Stray)
		if p.afterRemove != nil {
			removed, err = p.afterRemove(removed, err)
		}
		switch {
		case errors.Is(err, lwt.ErrOutcomeUnknown):
			unsettled, pending = err, cancelEntry(id, l, p.cfg.Clock.Now())
			continue
		case err != nil:
			return fmt.Errorf("producer: cancelling %s: %w", id, err)
		case !removed:
			continue // it moved under us: look again
		}
		// A cancelled task is not found, but its entry stays: its key's next claimer needs
		// to see it ended, and a consumer that comes upon a timeout marker a lease fault
		// left behind, unseen by this cancel, drops it rather than run the task. Such a
		// marker comes due within the task's timeout.
		//
		// Stamped as the final step of the next delivery, not of the row's: a consumer that
		// read the row before we removed it declares its lease (token + 1, step 0) before
		// its swap, which then does not apply, and that declaration may land after this
		// entry. Stamped as the row's delivery, it would replace the cancel, and the marker
		// that swap wrote (left when its drop fails) would run the cancelled task.
		return p.recordCancel(ctx, cancelEntry(id, l, p.cfg.Clock.Now()))
	}
	if unsettled != nil {
		return fmt.Errorf("producer: cancelling %s: %w", id, unsettled)
	}
	return fmt.Errorf("producer: cancelling %s: it kept moving (%d tries)", id, maxMoves)
}

// cancelEntry is the index entry recording the cancel of the task found as l, at now.
func cancelEntry(id uuid.UUID, l tasklookup.Found, now time.Time) taskindex.Write {
	token := l.Row.Token
	if l.Stray != nil {
		token = max(token, l.Stray.Token)
	}
	return taskindex.Write{Entry: taskindex.Entry{TaskID: id, Queue: l.Entry.Queue, State: taskindex.Cancelled,
		DueAt: l.Row.DueAt, Attempt: l.Row.Attempt, Token: l.Row.Token, DoneAt: now},
		Stamp: taskindex.Stamp(id, token+1, taskindex.Final), TTL: taskindex.Finished + l.Row.Timeout, Replace: true}
}

// recordCancel writes a cancel's index entry, trying again while it fails: without it a
// copy the cancel could not see finds the task's entry in flight and runs it. The write is
// idempotent (one stamp). If it never applies the task's row is still gone, so Get and
// key claims find it ended, but the call reports the error rather than a cancel it
// cannot promise.
func (p *Producer) recordCancel(ctx context.Context, done taskindex.Write) error {
	b := newBackoff()
	var err error
	for i := range recordTries {
		if i > 0 {
			if werr := b.wait(ctx); werr != nil {
				break
			}
		}
		if p.failRecord != nil {
			err = p.failRecord()
		}
		if err == nil {
			if _, err = p.store.Index().Write(ctx, []taskindex.Write{done}, 1); err == nil {
				return nil
			}
		}
		p.cfg.Logger.WarnContext(ctx, "recording a cancel in the index", "task_id", done.Entry.TaskID, "error", err)
	}
	return fmt.Errorf("producer: cancelled %s, but recording it failed (a copy a lease fault left may still run it): %w", done.Entry.TaskID, err)
}

// recordTries bounds the tries of a cancel's index write: up to about half a second.
const recordTries = 8

// CancelByKey cancels the task that holds key in queue, as Cancel.
func (p *Producer) CancelByKey(ctx context.Context, queue, key string, opts CancelOptions) error {
	id, err := p.tasks.KeyHolder(ctx, queue, key)
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
// It returns a *shardqtype.TaskInFlightError for a task a consumer holds,
// shardqtype.ErrTaskNotFound for one that completed, died or does not exist, and
// lock.ErrLockHeld, the task unchanged, when consumers kept its partition locked for three
// lock TTLs.
func (p *Producer) Reschedule(ctx context.Context, id uuid.UUID, opts RescheduleOptions) error {
	if opts.Priority != nil && (*opts.Priority < shardqtype.MinPriority || *opts.Priority > shardqtype.MaxPriority) {
		return defaults.Invalid("opts.Priority", "%d is not in [%d, %d]", *opts.Priority, shardqtype.MinPriority, shardqtype.MaxPriority)
	}
	if !opts.DueAt.IsZero() && (opts.DueAt.Before(shard.MinIDTime) || opts.DueAt.After(shard.MaxIDTime)) {
		return defaults.Invalid("opts.DueAt", "%v is outside [%v, %v]", opts.DueAt, shard.MinIDTime.UTC(), shard.MaxIDTime)
	}
	if !opts.DueAt.IsZero() && opts.DueAt.After(p.cfg.Clock.Now().Add(MaxDueAhead)) {
		return defaults.Invalid("opts.DueAt", "%v is more than MaxDueAhead (%v) after now", opts.DueAt, MaxDueAhead)
	}
	for range maxMoves {
		l, err := p.tasks.Locate(ctx, id)
		if err != nil {
			return err
		}
		if l.State == taskindex.Dead || l.State == taskindex.Completed || l.State == taskindex.Cancelled {
			return fmt.Errorf("%w: %s is done", shardqtype.ErrTaskNotFound, id)
		}
		info := p.tasks.Info(l)
		if info.State == shardqtype.TaskInFlight {
			return &shardqtype.TaskInFlightError{ID: id, Token: info.Token, Deadline: info.Deadline}
		}
		q, err := p.queue(ctx, l.Entry.Queue)
		if err != nil {
			return err
		}
		// Before the index entry of the move stops naming it. A lease move's marker goes
		// with the move instead: a crash in between leaves it, a duplicate.
		if l.Stray != nil && !l.LeaseMove() {
			if err := p.dropStray(ctx, q, l); err != nil {
				return fmt.Errorf("producer: rescheduling %s: %w", id, err)
			}
			continue // look again, without it
		}
		// Where the task goes by the time now, which names the partitions to lock; made
		// again once they are held.
		now := p.cfg.Clock.Now()
		next, place := p.rescheduled(q, l, info, opts, now)
		if l.Row.Keyed && l.Entry.Key != "" {
			// Before the move: a claim longer than needed is harmless, one shorter lets a
			// second task take the key while this one still waits.
			err := p.keepClaim(ctx, q.Name, l.Entry.Key, id, taskindex.TTL(now, place))
			var dup *DuplicateError
			switch {
			case errors.As(err, &dup):
				// Another live task took the key after this one's claim ran out (as claims
				// of earlier versions could): there is no claim of ours left to keep.
				p.cfg.Logger.WarnContext(ctx, "rescheduling a task whose key another task holds",
					"task_id", id, "key", l.Entry.Key, "holder", dup.ExistingID)
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
	id, err := p.tasks.KeyHolder(ctx, queue, key)
	if err != nil {
		return err
	}
	return p.Reschedule(ctx, id, opts)
}

// rescheduled is the row the task of l moves to when rescheduled by opts at now, and
// the time it becomes visible.
func (p *Producer) rescheduled(q shardqtype.QueueConfig, l tasklookup.Found, info *shardqtype.TaskInfo, opts RescheduleOptions, now time.Time) (taskrow.Row, time.Time) {
	next := l.Row
	due := opts.DueAt
	if due.IsZero() {
		due = info.DueAt
	}
	if l.State == taskindex.Scheduled {
		next.DueAt = due // a retrying row keeps the due time first asked for
	}
	if opts.Priority != nil {
		next.Priority = int8(*opts.Priority)
	}
	place := due
	if place.Before(now) {
		place = now
	}
	next.ID = shard.NewID(place)
	lay := p.state.Place(q, place, now)
	next.Key = lay.Key(lay.Bucket(place), lay.ShardFor(next.TaskID))
	next.Retrying = l.State != taskindex.Scheduled // a lapsed lease is pending again too
	return next, place
}

// reschedule moves the task of l as opts say into partition dst, under the locks of
// its partition and dst, taking along l.Stray, a lease move's new marker when there is
// one (see swap). It reports false when the task moved under it, or when the time the
// lock wait took sends it to another partition than dst: the caller looks again.
func (p *Producer) reschedule(ctx context.Context, q shardqtype.QueueConfig, l tasklookup.Found, info *shardqtype.TaskInfo, opts RescheduleOptions, dst string) (bool, error) {
	m, err := p.lockMove(ctx, q, l.Row.Key, dst, l.Stray)
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
	state := l.State
	if state == taskindex.InFlight {
		state = taskindex.Retrying // its lease ran out: pending again
	}
	entry := taskindex.Entry{TaskID: info.ID, Queue: q.Name, State: state, Row: loc(next), PrevState: state,
		Prev: loc(l.Row), DueAt: next.DueAt, Attempt: next.Attempt, Token: next.Token}
	ttl := taskindex.TTL(now, place)
	if _, err := p.store.Index().Write(ctx, []taskindex.Write{{Entry: entry, Stamp: l.Stamp + 1, TTL: ttl}}, 1); err != nil {
		return false, err
	}
	moved, err := p.swap(ctx, m, l.Row, &next, l.Stray)
	if err != nil || !moved {
		return false, err
	}
	// Confirm the move, so that a racing call's entry (same timestamp, lost move)
	// cannot stand.
	entry.Prev, entry.PrevState = taskindex.Loc{}, 0
	if _, err := p.store.Index().Write(ctx, []taskindex.Write{{Entry: entry, Stamp: l.Stamp + 2, TTL: ttl}}, 1); err != nil {
		p.cfg.Logger.WarnContext(ctx, "confirming a reschedule in the index", "task_id", info.ID, "error", err)
	}
	var touches signal.Touches
	touches.Add(p.state.LayoutOf(q, next.Key), next.ID, next.TaskID)
	if err := p.signals.Touch(ctx, &touches); err != nil {
		p.cfg.Logger.WarnContext(ctx, "touching wake-up signals", "error", err)
	}
	p.state.Bus.Wake(q.Name, place) // after the touch, as producer.wake explains
	return true, nil
}

// remove deletes the pending row from, fenced against consumers, and stray, a lease
// move's new marker, when given (see swap): it reports false when from was gone (a
// consumer took it, or another call moved it).
func (p *Producer) remove(ctx context.Context, q shardqtype.QueueConfig, from taskrow.Row, stray *taskrow.Row) (bool, error) {
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
func (p *Producer) lockMove(ctx context.Context, q shardqtype.QueueConfig, from, to string, stray *taskrow.Row) (*moveLocks, error) {
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
// stray, when given, is the new marker of a lease move out of from (tasklookup.Found.LeaseMove)
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
	var stamp int64 // to's, when written apart
	switch {
	case apart:
		stamp = p.cluster.Stamp(p.cfg.Clock.Now())
		if err := tasks.Write(ctx, []store.Mutation{{Op: store.Insert, Row: *to, Stamp: stamp}}); err != nil {
			p.dropRow(ctx, *to, stamp)
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
		p.dropRow(ctx, *to, stamp)
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

// dropRow deletes a row written at stamp for a move that did not happen. We hold its
// partition's lock, so no consumer took it.
func (p *Producer) dropRow(ctx context.Context, r taskrow.Row, stamp int64) {
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	if err := p.store.Tasks().Write(rctx, []store.Mutation{{Op: store.Delete, Row: r, Stamp: stamp}}); err != nil {
		p.cfg.Logger.WarnContext(ctx, "deleting the row of a move that did not happen; the task may run twice",
			"partition_key", r.Key, "task_id", r.TaskID, "error", err)
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
func (p *Producer) lockKeys(ctx context.Context, q shardqtype.QueueConfig, keys []string) ([]*locking.Lock, error) {
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
func (p *Producer) lockEach(ctx context.Context, q shardqtype.QueueConfig, locker *locking.Locker, keys []string, give time.Time) ([]*locking.Lock, error) {
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

func (p *Producer) locker(q shardqtype.QueueConfig) (*locking.Locker, error) {
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
	case <-time.After(b.next/2 + random.N(b.next/2+1)):
	}
	b.next = min(2*b.next, 200*time.Millisecond)
	return nil
}
