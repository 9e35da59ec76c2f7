package series

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// ErrNotFound means no series of that name exists in the queue.
var ErrNotFound = errors.New("shardq: series not found")

// State is a series' row. Every change but Written is a lightweight transaction on
// Version, so of two processes moving a series past one occurrence exactly one does.
type State struct {
	Queue, Name string
	Spec        Spec
	Version     int64
	Paused      bool
	// Done says the series ended: its End or Count was reached.
	Done bool
	// Seq counts the occurrences scheduled; the latest is TaskID, due at Nominal.
	Seq int64
	// Open says occurrence Seq is outstanding: pending, in flight or retrying.
	Open    bool
	TaskID  uuid.UUID
	Nominal time.Time
	// Priority and Stamp place and stamp the occurrence's row, so a repair writes the
	// very row that was meant (see Env.write).
	Priority int8
	Stamp    int64
	// CatchUp says the occurrence stands for occurrences that were missed.
	CatchUp    bool
	AdvancedAt time.Time
	CreatedAt  time.Time
	// Written is the last occurrence known to be written: a plain write after the task's.
	Written uuid.UUID
}

// Pending reports whether the state's occurrence may not be written yet.
func (st State) Pending() bool { return st.Open && st.Written != st.TaskID }

// Next moves st to its following occurrence as of now: the first one after Nominal, or
// per the missed-occurrence policy when that one is past. A paused or ended series gets
// none: it is closed.
func (st *State) Next(now time.Time) error {
	anchor := st.Spec.Start
	if anchor.IsZero() {
		anchor = st.CreatedAt.Add(st.Spec.Every)
	}
	return st.schedule(now, st.Seq == 0, anchor)
}

// Replace schedules again the occurrence in hand, as the first of the series' current
// definition from now on, keeping its number.
func (st *State) Replace(now time.Time) error {
	anchor := st.Spec.Start
	if anchor.IsZero() {
		anchor = now.Truncate(time.Millisecond).Add(st.Spec.Every)
	}
	st.Seq--
	return st.schedule(now, true, anchor)
}

func (st *State) schedule(now time.Time, fresh bool, anchor time.Time) error {
	sc, err := st.Spec.Schedule()
	if err != nil {
		return err
	}
	st.Open = false
	if st.Paused || st.Done {
		return nil
	}
	var nominal time.Time
	catchUp := false
	switch {
	case fresh:
		nominal = sc.first(anchor, maxTime(now, st.Spec.Start))
	default:
		nominal = sc.after(st.Nominal)
		if !nominal.IsZero() && nominal.Before(now) {
			if st.Spec.CatchUp && !st.CatchUp {
				catchUp = true
			} else {
				nominal = sc.first(st.Nominal, now)
			}
		}
	}
	if nominal.IsZero() || (!st.Spec.End.IsZero() && nominal.After(st.Spec.End)) ||
		(st.Spec.Count > 0 && st.Seq >= st.Spec.Count) {
		st.Done = true
		return nil
	}
	st.Seq++
	st.Open, st.CatchUp, st.Nominal = true, catchUp, nominal
	st.TaskID = taskid.New(maxTime(nominal, now), st.Queue)
	st.Priority = int8(st.Spec.Priority)
	st.AdvancedAt = now
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Env is what moving series needs.
type Env struct {
	Store   store.Series
	Tasks   store.Tasks // for occurrences' rows
	Clock   shardqtype.Clock
	Cluster *clustertime.Clock // stamps occurrences' writes
	Log     *slog.Logger
	Signals *signal.Toucher
	Bus     *wakeup.Bus
	// Layout returns the layout of an occurrence of q whose ID has time t (see
	// sessionstate.State.Fixed); nil: q's first layout.
	Layout func(ctx context.Context, q shardqtype.QueueConfig, t time.Time) (shard.Layout, error)
	// KeptNames lists a queue's series for Keep, as read at most a keeping round ago
	// (sessionstate.State.KeptNames); nil: Names.
	KeptNames func(ctx context.Context, queue string) ([]string, error)
}

// recordStamp is the write timestamp of a series' name and written records: the
// cluster's time, whatever clock the client was given (tests give one far in the past),
// so that those records, which only such writes make, follow one another in real time
// whichever process writes them. Stamped by each host's clock, a delete from a host
// whose clock led shadowed a name listed again after it.
func (e *Env) recordStamp() int64 { return e.Cluster.Now().UnixMicro() }

// occurrenceLayout returns the layout st's occurrence is written under.
func (e *Env) occurrenceLayout(ctx context.Context, q shardqtype.QueueConfig, st State) (shard.Layout, error) {
	return e.layoutAt(ctx, q, shard.IDTime(st.TaskID))
}

// layoutAt returns the layout of an occurrence of q whose ID has time t (Env.Layout).
func (e *Env) layoutAt(ctx context.Context, q shardqtype.QueueConfig, t time.Time) (shard.Layout, error) {
	if e.Layout == nil {
		return q.Layout(), nil
	}
	return e.Layout(ctx, q, t)
}

// Load reads a series; serial reads settle any change in flight first.
func (e *Env) Load(ctx context.Context, queue, name string, serial bool) (State, error) {
	r, err := e.Store.Get(ctx, queue, name, serial)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return State{Queue: queue, Name: name}, fmt.Errorf("%w: %s in queue %s", ErrNotFound, name, queue)
	case err != nil:
		return State{Queue: queue, Name: name}, fmt.Errorf("series: reading %s of queue %s: %w", name, queue, err)
	}
	st := State{Queue: queue, Name: name, Version: r.Version, Paused: r.Paused, Done: r.Done, Seq: r.Seq, Open: r.Open,
		TaskID: r.TaskID, Nominal: r.Nominal, Priority: r.Priority, Stamp: r.Stamp, CatchUp: r.CatchUp,
		AdvancedAt: r.AdvancedAt, CreatedAt: r.CreatedAt, Written: r.Written}
	if st.Spec, err = decode(r.Spec); err != nil {
		return st, fmt.Errorf("series: decoding %s of queue %s: %w", name, queue, err)
	}
	return st, nil
}

// Names lists the series of a queue, in name order.
func (e *Env) Names(ctx context.Context, queue string) ([]string, error) {
	names, err := e.Store.Names(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("series: listing queue %s: %w", queue, err)
	}
	return names, nil
}

// row is st as stored.
func (st State) row() store.SeriesRow {
	return store.SeriesRow{Queue: st.Queue, Name: st.Name, Spec: st.Spec.Encode(), Version: st.Version, Paused: st.Paused,
		Done: st.Done, Seq: st.Seq, Open: st.Open, TaskID: st.TaskID, Nominal: st.Nominal, Priority: st.Priority,
		Stamp: st.Stamp, CatchUp: st.CatchUp, AdvancedAt: st.AdvancedAt, CreatedAt: st.CreatedAt}
}

// Create writes a new series with its first occurrence, unless one of that name exists;
// it returns the series as stored and whether this call created it.
func (e *Env) Create(ctx context.Context, q shardqtype.QueueConfig, name string, spec Spec) (State, bool, error) {
	now := e.Clock.Now()
	// Whole milliseconds, as stored: an interval's occurrences fall on the same grid
	// whether computed now or from the stored row.
	st := State{Queue: q.Name, Name: name, Spec: spec, Version: 1, CreatedAt: now.Truncate(time.Millisecond)}
	if err := st.Next(now); err != nil {
		return st, false, err
	}
	st.Stamp = e.Cluster.Stamp(now)
	// The name first: a series is listed (and kept) from the moment it may exist.
	if err := e.Store.AddName(ctx, q.Name, name, e.recordStamp()); err != nil {
		return st, false, fmt.Errorf("series: creating %s: %w", name, err)
	}
	applied, err := e.put(ctx, st, 0)
	if err != nil {
		return st, false, err
	}
	if !applied {
		cur, err := e.Load(ctx, q.Name, name, true)
		return cur, false, err
	}
	return st, true, e.Write(ctx, q, st)
}

// cas runs one conditional change of series queue/name, write; settle tells from the
// state read back at SERIAL whether an unknown outcome applied.
func (e *Env) cas(ctx context.Context, queue, name string, write func(context.Context) (bool, error), settle func(State, error) bool) (bool, error) {
	return lwt.Apply(ctx, write, func(rctx context.Context, cause error) (bool, error) {
		cur, err := e.Load(rctx, queue, name, true)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("%w: changing series %s: %w (reading back: %w)", lwt.ErrOutcomeUnknown, name, cause, err)
		}
		return settle(cur, err), nil
	})
}

// put stores st if the stored version is from (0: no series), and settles an unknown
// outcome: versions only grow and each is written once with a fresh occurrence ID, so
// seeing st's version and occurrence means st applied.
func (e *Env) put(ctx context.Context, st State, from int64) (bool, error) {
	put := func(ctx context.Context) (bool, error) { return e.Store.Put(ctx, st.row(), from) }
	return e.cas(ctx, st.Queue, st.Name, put, func(cur State, err error) bool {
		return err == nil && cur.Version == st.Version && cur.TaskID == st.TaskID && cur.Seq == st.Seq
	})
}

// Change applies f to series name and stores the result, retrying on concurrent changes;
// f returns false when there is nothing to do. A new occurrence that f's change makes is
// written before Change returns. It returns the stored state.
func (e *Env) Change(ctx context.Context, q shardqtype.QueueConfig, name string, f func(st *State, now time.Time) (bool, error)) (State, error) {
	for attempt := range 8 {
		st, err := e.Load(ctx, q.Name, name, attempt > 0)
		if err != nil {
			return st, err
		}
		before := st
		now := e.Clock.Now()
		ok, err := f(&st, now)
		if err != nil || !ok {
			return before, err
		}
		if st.TaskID != before.TaskID {
			// The occurrence's write is stamped now, before the takes that delete it.
			st.Stamp = e.Cluster.Stamp(now)
		}
		st.Version = before.Version + 1
		applied, err := e.put(ctx, st, before.Version)
		if err != nil {
			return before, err
		}
		if !applied {
			continue
		}
		if st.Open && st.TaskID != before.TaskID {
			return st, e.Write(ctx, q, st)
		}
		return st, nil
	}
	return State{}, fmt.Errorf("series: %s of queue %s changed under every one of 8 attempts", name, q.Name)
}

// Delete removes series name if it is still at version.
func (e *Env) Delete(ctx context.Context, st State) (bool, error) {
	del := func(ctx context.Context) (bool, error) { return e.Store.Delete(ctx, st.Queue, st.Name, st.Version) }
	applied, err := e.cas(ctx, st.Queue, st.Name, del, func(_ State, err error) bool { return errors.Is(err, ErrNotFound) })
	if err != nil || !applied {
		return applied, err
	}
	return true, e.Store.DeleteName(ctx, st.Queue, st.Name, e.recordStamp())
}

// Advance moves series name past its occurrence id when that is still its open one:
// the next occurrence is scheduled, or the series closes when it is paused or ended.
// onTake says the occurrence was just taken rather than finished, which moves only a
// series that asks for that.
func (e *Env) Advance(ctx context.Context, q shardqtype.QueueConfig, name string, id uuid.UUID, onTake bool) error {
	_, err := e.Change(ctx, q, name, func(st *State, now time.Time) (bool, error) {
		if !st.Open || st.TaskID != id || (onTake && !st.Spec.OnTake) {
			return false, nil
		}
		return true, st.Next(now)
	})
	if errors.Is(err, ErrNotFound) {
		return nil // deleted: its last occurrence ends it
	}
	return err
}

// Write writes st's occurrence: the same row, with the same write timestamp, however
// often it is called, so a repeat after a consumer took the row is shadowed by the
// take's delete. Then it records the occurrence as written.
func (e *Env) Write(ctx context.Context, q shardqtype.QueueConfig, st State) error {
	timeout := st.Spec.Timeout
	if timeout == 0 {
		timeout = q.DefaultTimeout
	}
	l, err := e.occurrenceLayout(ctx, q, st)
	if err != nil {
		return fmt.Errorf("series: writing occurrence %d of %s: %w", st.Seq, st.Name, err)
	}
	r := occurrenceRow(l, st)
	r.Payload, r.DueAt, r.Timeout, r.Series, r.Kind = st.Spec.Payload, st.Nominal, timeout, st.Name, st.Spec.Kind
	err = e.Tasks.Write(ctx, []store.Mutation{{Op: store.Insert, Row: r, Stamp: st.Stamp}})
	// Touched whatever the outcome: a write that failed may have applied, and a row
	// written later than its place with no touch lies below consumers' floors for a lap.
	e.signal(ctx, q, l, st)
	if err != nil {
		return fmt.Errorf("series: writing occurrence %d of %s: %w", st.Seq, st.Name, err)
	}
	return e.markWritten(ctx, st)
}

// signal touches the signal cell of st's occurrence and wakes this process's workers.
func (e *Env) signal(ctx context.Context, q shardqtype.QueueConfig, l shard.Layout, st State) {
	var touches signal.Touches
	touches.Add(l, st.TaskID, st.TaskID)
	if err := e.Signals.Touch(ctx, &touches); err != nil {
		e.Log.WarnContext(ctx, "touching wake-up signals", "queue", q.Name, "error", err)
	}
	// After the touch: an idle consumer passes a partition whose cell shows no touch.
	e.Bus.Wake(q.Name, shard.IDTime(st.TaskID))
}

// occurrenceRow is the key of st's occurrence's row, laid out by l: its place is its
// task ID's time.
func occurrenceRow(l shard.Layout, st State) taskrow.Row {
	id := st.TaskID
	return taskrow.Row{Key: l.Key(l.Bucket(shard.IDTime(st.TaskID)), l.ShardFor(st.TaskID)), Priority: st.Priority, ID: id, TaskID: id}
}
