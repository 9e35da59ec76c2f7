package series

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// RepairAfter is how long after a series moved its occurrence may still be unwritten
// before a keeper writes it: the mover normally writes it within milliseconds, and
// writing it twice is harmless (see Env.Write), so the wait only saves work.
const RepairAfter = 5 * time.Second

// StalledAfter is how long after its time an occurrence that no longer exists (or is
// taken, for series that move on take) may leave its series unmoved before a keeper
// moves it: the consumer moves it at once, unless it died in between.
const StalledAfter = 10 * time.Second

// Status is what a keeper needs to know of an occurrence: whether it still exists,
// whether a consumer has taken it, and whether it ran to its end.
type Status int

const (
	Gone    Status = iota // no trace of it: never written, or ended long ago
	Waiting               // written, not taken
	Taken                 // in flight or waiting for a retry
	Ended                 // completed, dead or cancelled: it was written
)

// Keep checks every series of queue q once: an occurrence its mover did not write is
// written, a series whose occurrence ended (or, for series moving on take, was taken)
// without moving it on is moved, and a resumed series left closed is opened. status
// tells what became of an occurrence.
func (e *Env) Keep(ctx context.Context, q shardqtype.QueueConfig, status func(context.Context, uuid.UUID) (Status, error)) error {
	list := e.Names
	if e.KeptNames != nil {
		list = e.KeptNames
	}
	names, err := list(ctx, q.Name)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := e.keep(ctx, q, name, status); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (e *Env) keep(ctx context.Context, q shardqtype.QueueConfig, name string, status func(context.Context, uuid.UUID) (Status, error)) error {
	st, err := e.Load(ctx, q.Name, name, false)
	if err != nil {
		return err
	}
	now := e.Clock.Now()
	switch {
	case !st.Open && !st.Paused && !st.Done:
		// Resumed by a process that died before scheduling the next occurrence.
		_, err := e.Change(ctx, q, name, func(st *State, now time.Time) (bool, error) {
			if st.Open || st.Paused || st.Done {
				return false, nil
			}
			return true, st.Next(now)
		})
		return err
	case !st.Open:
		return nil
	case st.Pending():
		if now.Before(st.AdvancedAt.Add(RepairAfter)) {
			return nil
		}
		s, err := status(ctx, st.TaskID)
		if err != nil {
			return err
		}
		l, err := e.occurrenceLayout(ctx, q, st)
		if err != nil {
			return fmt.Errorf("series: keeping occurrence %d of %s: %w", st.Seq, st.Name, err)
		}
		if s != Gone {
			// Written, and maybe run to its end by a consumer that then failed to move the
			// series: a new place would run it again. Its writer may have died or failed
			// before its touch, which a row written late needs to be found: touched again.
			if s == Waiting {
				e.signal(ctx, q, l, st)
			}
			return e.markWritten(ctx, st)
		}
		stale, err := e.stale(ctx, q, st, l, now)
		if err != nil {
			return fmt.Errorf("series: keeping occurrence %d of %s: %w", st.Seq, st.Name, err)
		}
		if stale {
			return e.replace(ctx, q, st, l)
		}
		e.Log.WarnContext(ctx, "writing an occurrence of a series its scheduler did not write",
			"queue", q.Name, "series", name, "task_id", st.TaskID)
		return e.Write(ctx, q, st)
	case now.Before(shard.IDTime(st.TaskID).Add(StalledAfter)):
		return nil
	}
	s, err := status(ctx, st.TaskID)
	if err != nil || s == Waiting || (s == Taken && !st.Spec.OnTake) {
		return err
	}
	e.Log.InfoContext(ctx, "moving a series whose consumer died before moving it", "queue", q.Name, "series", name, "task_id", st.TaskID)
	return e.Advance(ctx, q, name, st.TaskID, s == Taken)
}

// stale reports whether the place of st's occurrence, laid out by l, is too old to write
// it at now: judged by the lap of the ring its place is in, not the queue's first one
// (after a change to a shorter lap, that ring's consumers pass the place sooner), over
// half that lap old; or in a layout a later one replaced, which takes no new rows
// (layouts.History.Place): a row written into it late can land after a read found it
// empty and marked it drained.
func (e *Env) stale(ctx context.Context, q shardqtype.QueueConfig, st State, l shard.Layout, now time.Time) (bool, error) {
	cur, err := e.layoutAt(ctx, q, now)
	if err != nil {
		return false, err
	}
	return l.Generation < cur.Generation || now.After(shard.IDTime(st.TaskID).Add(l.Lap()/2)), nil
}

// Unplace makes sure st's pending occurrence never runs, when its place is too old to
// write it at (stale): written there, it would lie where consumers have passed. Its place
// is deleted, stamped past the occurrence's own write, so a write of it still on its way
// adds nothing. It reports false, doing nothing, when the place is not stale: the caller
// writes the occurrence and cancels it.
func (e *Env) Unplace(ctx context.Context, q shardqtype.QueueConfig, st State) (bool, error) {
	l, err := e.occurrenceLayout(ctx, q, st)
	if err != nil {
		return false, fmt.Errorf("series: withdrawing occurrence %d of %s: %w", st.Seq, st.Name, err)
	}
	stale, err := e.stale(ctx, q, st, l, e.Clock.Now())
	if err != nil || !stale {
		return false, err
	}
	del := store.Mutation{Op: store.Delete, Row: occurrenceRow(l, st), Stamp: e.Cluster.DeleteStamp()}
	if err := e.Tasks.Write(ctx, []store.Mutation{del}); err != nil {
		return false, fmt.Errorf("series: deleting the old place of occurrence %d of %s: %w", st.Seq, st.Name, err)
	}
	return true, nil
}

// replace gives st's unwritten occurrence, whose place in the ring of layout l is over
// half l's lap old or in a layout no longer in force, a new place now: a row written there
// would lie in a bucket consumers have passed, found only by a sweep within the lap, and
// past the lap never, or in a ring they may read no more. Its old place is deleted first,
// stamped past the occurrence's own write, so a write of it still on its way adds
// nothing; the occurrence keeps its number and time.
func (e *Env) replace(ctx context.Context, q shardqtype.QueueConfig, old State, l shard.Layout) error {
	e.Log.WarnContext(ctx, "writing an occurrence of a series its scheduler did not write, at a new place: its own is too old or in a replaced layout",
		"queue", q.Name, "series", old.Name, "task_id", old.TaskID)
	del := store.Mutation{Op: store.Delete, Row: occurrenceRow(l, old), Stamp: e.Cluster.DeleteStamp()}
	if err := e.Tasks.Write(ctx, []store.Mutation{del}); err != nil {
		return fmt.Errorf("series: deleting the old place of occurrence %d of %s: %w", old.Seq, old.Name, err)
	}
	_, err := e.Change(ctx, q, old.Name, func(st *State, now time.Time) (bool, error) {
		if !st.Pending() || st.TaskID != old.TaskID {
			return false, nil
		}
		st.TaskID, st.AdvancedAt = taskid.New(now, st.Queue), now
		return true, nil
	})
	return err
}

func (e *Env) markWritten(ctx context.Context, st State) error {
	if err := e.Store.MarkWritten(ctx, st.Queue, st.Name, st.TaskID, e.recordStamp()); err != nil {
		return fmt.Errorf("series: recording occurrence %d of %s: %w", st.Seq, st.Name, err)
	}
	return nil
}
