// Package tasklookup finds a task by its ID or unique key: the row its index entry names,
// confirmed against the tasks table (or, for a task that never moved and has no key, the
// row its ID names), and the state that makes it. The inspector reports what it finds;
// the producer's Cancel and Reschedule and its key claims act on it; the series keeper
// asks whether an occurrence is still outstanding.
package tasklookup

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Finder looks tasks up in one keyspace. It is safe for concurrent use.
type Finder struct {
	store store.Store
	clock shardqtype.Clock // tells a lease still running from one ended, and a completion's age
	queue func(ctx context.Context, name string) (shardqtype.QueueConfig, error)

	hintsMu sync.Mutex
	hints   map[uint16][]string // taskid.Hint -> queue names, as last read
}

// New returns a Finder reading st, telling time by clock and reading queues' settings
// through queue.
func New(st store.Store, clock shardqtype.Clock, queue func(ctx context.Context, name string) (shardqtype.QueueConfig, error)) *Finder {
	return &Finder{store: st, clock: clock, queue: queue}
}

// Found is where a task is: its index entry, confirmed against the tasks table.
type Found struct {
	Entry taskindex.Entry
	Stamp int64           // the entry's write timestamp
	State taskindex.State // the state of the row found, or the entry's final state
	Row   taskrow.Row     // the task's row, for the pending and in-flight states
	// Stray is the row the entry names as the task's next place, found beside Row: a
	// consumer's swap or a Reschedule wrote it ahead of a move out of Row that never
	// applied (the producer drops it), or a holder's lease move ahead of its delete of
	// Row, which may still apply (see LeaseMove).
	Stray *taskrow.Row
}

// LeaseMove reports whether f.Stray is the new marker of a lease move (Extend or Retry):
// its holder deletes f.Row with a lightweight transaction that no lock fences, so the
// move may still apply, and f.Stray must outlive f.Row.
func (f Found) LeaseMove() bool {
	return f.Stray != nil && f.Entry.PrevState == taskindex.InFlight
}

// Locate finds task id: the row its index entry names now, or, when that move has not
// happened (or a crash cut it short), the row it names as the previous place.
//
// A move writes the entry before it deletes the row it leaves, so a move that applied
// between the read of the entry and the reads of its rows leaves neither there: the
// entry is read again, and the task looked for where the new one says, as long as
// the entry keeps changing under the reads (up to relocateTries times); so is a task never
// moved before, which has no entry, whose first move took it from its home between the
// reads. Only a task whose entry stayed as read (or absent) while its rows were gone is
// not found.
func (fi *Finder) Locate(ctx context.Context, id uuid.UUID) (Found, error) {
	if err := CheckID("id", id); err != nil {
		return Found{}, err
	}
	e, stamp, readErr := fi.store.Index().Read(ctx, id)
	for range relocateTries {
		f, err := fi.locate(ctx, id, e, stamp, readErr)
		if !errors.Is(err, errMoved) {
			return f, err
		}
		again, stampAgain, errAgain := fi.store.Index().Read(ctx, id)
		if errAgain == nil && readErr == nil && stampAgain == stamp ||
			errors.Is(errAgain, taskindex.ErrNotFound) && errors.Is(readErr, taskindex.ErrNotFound) {
			break // no move since: the task is gone
		}
		e, stamp, readErr = again, stampAgain, errAgain
	}
	return Found{}, fmt.Errorf("%w: %s", shardqtype.ErrTaskNotFound, id)
}

// relocateTries bounds how many moves of a task one Locate follows.
const relocateTries = 8

// errMoved: neither row an entry names is there, which a move after the entry's read
// explains.
var errMoved = errors.New("tasklookup: moved")

// locate finds task id from its entry e (written at stamp), or reports errMoved.
func (fi *Finder) locate(ctx context.Context, id uuid.UUID, e taskindex.Entry, stamp int64, err error) (Found, error) {
	switch {
	case errors.Is(err, taskindex.ErrNotFound):
		return fi.home(ctx, id)
	case err != nil:
		return Found{}, fmt.Errorf("tasklookup: %w", err)
	case e.State == taskindex.Dead || e.State == taskindex.Completed || e.State == taskindex.Cancelled:
		return Found{Entry: e, Stamp: stamp, State: e.State}, nil
	}
	// The previous place first: if it is still there, the move the entry declares has
	// not happened (or its process died before finishing it), and the state is the one
	// before.
	for i, c := range []struct {
		state taskindex.State
		at    taskindex.Loc
	}{{e.PrevState, e.Prev}, {e.State, e.Row}} {
		if c.at.Key == "" {
			continue
		}
		r, ok, err := fi.readRow(ctx, c.at)
		if err != nil {
			return Found{}, err
		}
		if !ok {
			continue
		}
		f := Found{Entry: e, Stamp: stamp, State: c.state, Row: r}
		if i == 0 && e.Row.Key != "" {
			stray, ok, err := fi.readRow(ctx, e.Row)
			if err != nil {
				return Found{}, err
			}
			if ok {
				f.Stray = &stray
			}
		}
		return f, nil
	}
	return Found{}, errMoved
}

// home finds a task that has not moved since it was scheduled without a key, and so has
// no index entry: its row is where its ID puts it, in a queue whose hint the ID carries.
func (fi *Finder) home(ctx context.Context, id uuid.UUID) (Found, error) {
	names, err := fi.queuesHinted(ctx, taskid.Hint(id))
	if err != nil {
		return Found{}, err
	}
	for _, name := range names {
		q, err := fi.queue(ctx, name)
		if err != nil {
			return Found{}, err
		}
		// The first layout first, which is all most queues have; then any the queue
		// changed to, in whose ring a producer may have written it (layouts.History.Place).
		lays := []shard.Layout{q.Layout()}
		for i := 0; i < len(lays); i++ {
			lay := lays[i]
			key := lay.Key(lay.Bucket(shard.IDTime(id)), lay.ShardFor(id))
			r, ok, err := fi.store.Tasks().Find(ctx, key, allPriorities, id)
			if err != nil {
				return Found{}, fmt.Errorf("tasklookup: reading %s: %w", key, err)
			}
			if ok && r.TaskID == id {
				e := taskindex.Entry{TaskID: id, Queue: name, State: taskindex.Scheduled,
					Row: taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID}, DueAt: r.DueAt}
				return Found{Entry: e, Stamp: taskindex.Stamp(id, 0, 0), State: taskindex.Scheduled, Row: r}, nil
			}
			if i == 0 {
				later, err := fi.laterLayouts(ctx, q)
				if err != nil {
					return Found{}, err
				}
				lays = append(lays, later...)
			}
		}
	}
	return Found{}, errMoved // or gone: Locate reads the entry again to tell
}

// laterLayouts returns the layouts queue q changed to after its first.
func (fi *Finder) laterLayouts(ctx context.Context, q shardqtype.QueueConfig) ([]shard.Layout, error) {
	st, err := fi.store.Queues().Status(ctx, q.Name, false)
	if err != nil {
		return nil, fmt.Errorf("tasklookup: reading the layouts of queue %q: %w", q.Name, err)
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return nil, err
	}
	var out []shard.Layout
	for _, g := range h.Gens[1:] {
		out = append(out, g.Layout)
	}
	return out, nil
}

var allPriorities = func() []int8 {
	var ps []int8
	for p := shardqtype.MinPriority; p <= shardqtype.MaxPriority; p++ {
		ps = append(ps, int8(p))
	}
	return ps
}()

// queuesHinted returns the queues whose task IDs carry hint, reading the queue names
// again when none does (a queue made since).
func (fi *Finder) queuesHinted(ctx context.Context, hint uint16) ([]string, error) {
	fi.hintsMu.Lock()
	names, ok := fi.hints[hint]
	fi.hintsMu.Unlock()
	if ok {
		return names, nil
	}
	// Read without the lock: lookups do not queue behind one slow read.
	names, err := fi.store.Queues().Names(ctx)
	if err != nil {
		return nil, fmt.Errorf("tasklookup: listing queues: %w", err)
	}
	hints := map[uint16][]string{}
	for _, name := range names {
		h := taskid.HintOf(name)
		hints[h] = append(hints[h], name)
	}
	fi.hintsMu.Lock()
	fi.hints = hints
	fi.hintsMu.Unlock()
	return hints[hint], nil
}

func (fi *Finder) readRow(ctx context.Context, at taskindex.Loc) (taskrow.Row, bool, error) {
	r, ok, err := fi.store.Tasks().Read(ctx, at.Key, at.Priority, at.ID)
	if err != nil {
		return taskrow.Row{}, false, fmt.Errorf("tasklookup: reading %s: %w", at.Key, err)
	}
	return r, ok, nil
}

// Get reports the state of task id, or returns shardqtype.ErrTaskNotFound. A task scheduled
// by a call that returned reports TaskScheduled (or a later state); an acked one reports
// TaskCompleted within its queue's CompletedRetention, else it is not found.
//
// The state may lag a crash by one step: a consumer that dies between leasing a task and
// recording the lease leaves the task reported as pending until its lease would have
// ended, and one that dies between acking and recording the ack leaves it not found
// rather than completed.
func (fi *Finder) Get(ctx context.Context, id uuid.UUID) (*shardqtype.TaskInfo, error) {
	f, err := fi.Locate(ctx, id)
	if err != nil {
		return nil, err
	}
	switch f.State {
	case taskindex.Cancelled:
		return nil, fmt.Errorf("%w: %s was cancelled", shardqtype.ErrTaskNotFound, id)
	case taskindex.Completed:
		// Kept at least taskindex.Finished for key claims; reported for the retention.
		q, err := fi.queue(ctx, f.Entry.Queue)
		if err != nil {
			return nil, err
		}
		if !fi.clock.Now().Before(f.Entry.DoneAt.Add(q.CompletedRetention)) {
			return nil, fmt.Errorf("%w: %s completed", shardqtype.ErrTaskNotFound, id)
		}
	}
	return fi.Info(f), nil
}

// GetByKey reports the state of the task that holds key in queue, as Get.
func (fi *Finder) GetByKey(ctx context.Context, queue, key string) (*shardqtype.TaskInfo, error) {
	id, err := fi.KeyHolder(ctx, queue, key)
	if err != nil {
		return nil, err
	}
	return fi.Get(ctx, id)
}

// Info is the task found as f, as Get reports it (whatever the retention of a completed
// one).
func (fi *Finder) Info(f Found) *shardqtype.TaskInfo {
	e := f.Entry
	info := &shardqtype.TaskInfo{ID: e.TaskID, Queue: e.Queue, Key: e.Key, DueAt: e.DueAt, Attempt: e.Attempt, Token: e.Token}
	switch f.State {
	case taskindex.Dead, taskindex.Completed, taskindex.Cancelled:
		info.State = shardqtype.TaskDead
		if f.State != taskindex.Dead {
			info.State = shardqtype.TaskCompleted
		}
		info.LastError, info.FinishedAt = e.Error, e.DoneAt
		return info
	}
	r := f.Row
	info.Priority, info.Attempt, info.Token, info.Payload, info.DueAt = int(r.Priority), r.Attempt, r.Token, r.Payload, r.DueAt
	info.Headers = r.Headers
	info.Kind = r.Kind
	visible := shard.IDTime(r.ID)
	info.Timeout, info.VisibleAt, info.PartitionKey = r.Timeout, visible, r.Key
	switch {
	case f.State == taskindex.Scheduled:
		info.State = shardqtype.TaskScheduled
	case f.State == taskindex.InFlight && visible.After(fi.clock.Now()):
		info.State, info.Deadline = shardqtype.TaskInFlight, visible
	default:
		// Retried, or its lease ran out: due again when its row becomes visible.
		info.State, info.DueAt = shardqtype.TaskRetrying, visible
	}
	return info
}

// KeyHolder returns the task that last claimed key in queue.
func (fi *Finder) KeyHolder(ctx context.Context, queue, key string) (uuid.UUID, error) {
	c, err := fi.store.Keys().Get(ctx, queue, key, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return uuid.Nil, fmt.Errorf("%w: no task holds key %q of queue %q", shardqtype.ErrTaskNotFound, key, queue)
	case err != nil:
		return uuid.Nil, fmt.Errorf("tasklookup: %w", err)
	case c.Holder == uuid.Nil:
		// A row whose cells expired before its marker (left by claims of earlier versions).
		return uuid.Nil, fmt.Errorf("%w: no task holds key %q of queue %q", shardqtype.ErrTaskNotFound, key, queue)
	}
	return c.Holder, nil
}

// CheckID rejects what cannot be a task or dead letter ID, naming field: those are
// version 1 UUIDs.
func CheckID(field string, id uuid.UUID) error {
	if id.Version() != 1 {
		return defaults.Invalid(field, "%s is not a task ID (a version 1 UUID)", id)
	}
	return nil
}
