package consumer

import (
	"context"
	"errors"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

func loc(r taskrow.Row) taskindex.Loc {
	return taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID}
}

// rowState is the state of a task whose pending row is r: never delivered since it was
// scheduled, or delivered before and due again.
func rowState(r taskrow.Row) taskindex.State {
	if r.Attempt == 0 {
		return taskindex.Scheduled
	}
	return taskindex.Retrying
}

// moveEntry is the index write declaring that t moves from the row from (in state
// prev) to the row to (in state state), as step of its delivery.
func (c *Consumer) moveEntry(t *Task, state taskindex.State, to taskrow.Row, prev taskindex.State, from taskrow.Row, step int64) taskindex.Write {
	e := taskindex.Entry{TaskID: t.ID, State: state, Row: loc(to), PrevState: prev, Prev: loc(from)}
	return taskindex.Write{Entry: e, Stamp: taskindex.Stamp(t.ID, t.Token, step),
		TTL: taskindex.TTL(c.cfg.Clock.Now(), shard.IDTime(to.ID))}
}

// finishEntry is the index write of a delivery's last step: dead, or acked (kept as
// completed for the queue's retention, and at least taskindex.Finished when the task has
// a key or is a series occurrence, else removed).
func (c *Consumer) finishEntry(t *Task, state taskindex.State, cause string) taskindex.Write {
	now := c.cfg.Clock.Now()
	w := taskindex.Write{Stamp: taskindex.Stamp(t.ID, t.Token, taskindex.Final), Replace: true,
		Entry: taskindex.Entry{TaskID: t.ID, Queue: c.q.Name, State: state, DueAt: t.DueAt, Attempt: t.Attempt,
			Token: t.Token, Error: cause, DoneAt: now}}
	switch {
	case state == taskindex.Dead:
		w.TTL = deadletters.Retention
	case c.q.CompletedRetention == 0 && !t.marker.Keyed && t.Series == "":
		// Nothing will ask: the inspector reports acked tasks only for a retention, a keyed
		// task's next claimer needs to see that it ended, and a series keeper that the
		// occurrence it finds unrecorded was written and ran (series.Keep).
		w.Replace, w.Delete = false, true
	case t.Series != "":
		// A keeper that finds the occurrence unrecorded writes it again at a new place once
		// its own is half its ring's lap old: by then the entry must still say it ran. That
		// ring is the live layout the occurrence's ID puts it in (layouts.History.Fixed),
		// which a keeper whose history differs (a layout drained since) may take for another
		// live one; the longest live lap covers each, and the first layout may be none of them.
		w.TTL = max(c.q.CompletedRetention, taskindex.Finished, c.state.LongestLap(c.q)/2+series.StalledAfter)
	default:
		w.TTL = max(c.q.CompletedRetention, taskindex.Finished)
	}
	return w
}

// deadEntry is the index write of a task that died. A keyed task's entry keeps its key,
// which a replay claims again (the final entry replaces all the entry held); the key is
// read from the entry, as a task's row records only that it has one.
func (c *Consumer) deadEntry(ctx context.Context, t *Task, cause string) taskindex.Write {
	w := c.finishEntry(t, taskindex.Dead, cause)
	if !t.marker.Keyed {
		return w
	}
	e, _, err := c.state.Store.Index().Read(ctx, t.ID)
	if err != nil && !errors.Is(err, taskindex.ErrNotFound) {
		c.log.WarnContext(ctx, "reading the key of a task that died: a replay will not claim it again",
			"queue", c.q.Name, "task_id", t.ID, "error", err)
	}
	w.Entry.Key = e.Key
	return w
}

// finish records the last step of tasks' deliveries. Their moves are done, so a failure
// only leaves entries naming rows that are gone, which readers take for "not found": it
// is logged, not returned.
func (c *Consumer) finish(ctx context.Context, ws []taskindex.Write) {
	if c.crashed("finish") {
		return
	}
	if _, err := c.state.Store.Index().Write(ctx, ws, c.cfg.PartitionsInFlight); err != nil {
		c.log.WarnContext(ctx, "recording finished tasks in the index", "queue", c.q.Name, "tasks", len(ws), "error", err)
	}
}

// errCrashed is what a consumer told by a test to crash returns where it stopped.
var errCrashed = errors.New("consumer: crashed (test)")

func (c *Consumer) crashed(step string) bool { return c.crash != nil && c.crash(step) }
