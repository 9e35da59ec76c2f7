package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Retry gives a task back to the queue to be delivered again after delay (zero: at
// once). Its attempt count is kept, so the next delivery is Attempt+1. It returns
// ErrLeaseLost if the lease is gone.
func (c *Consumer) Retry(ctx context.Context, t *Task, delay time.Duration) error {
	return c.giveBack(ctx, t, delay, false)
}

// Snooze gives a task back to the queue to be delivered again after delay, as Retry
// does, but the delivery does not count as an attempt: the next delivery's Attempt is
// t.Attempt again. The count of snoozes is kept with the task, among its headers. It
// returns ErrLeaseLost if the lease is gone.
func (c *Consumer) Snooze(ctx context.Context, t *Task, delay time.Duration) error {
	return c.giveBack(ctx, t, delay, true)
}

// giveBack is Retry, or Snooze when snoozed: the marker moves to delay from now as a
// retry's, counting one more snooze among its headers when snoozed.
func (c *Consumer) giveBack(ctx context.Context, t *Task, delay time.Duration, snoozed bool) error {
	if err := c.checkOwn(ctx, t, "t"); err != nil {
		return err
	}
	if delay < 0 || delay > c.q.MaxTimeout() {
		return defaults.Invalid("delay", "%v is not in [0, %v]", delay, c.q.MaxTimeout())
	}
	var headers map[string]string
	if snoozed {
		headers = taskmeta.WithInt(t.marker.Headers, taskmeta.Snoozes, taskmeta.Int(t.marker.Headers, taskmeta.Snoozes)+1)
	}
	_, err := c.relocate(ctx, t, c.cfg.Clock.Now().Add(delay), taskindex.Retrying, headers)
	return err
}

// Extend moves a task's lease deadline to d from now, for handlers that need longer
// than the timeout, and updates t.Deadline. It returns ErrLeaseLost if the lease is gone.
// Do not call it concurrently with Ack, Retry or another Extend of the same task.
func (c *Consumer) Extend(ctx context.Context, t *Task, d time.Duration) error {
	if err := c.checkOwn(ctx, t, "t"); err != nil {
		return err
	}
	if d <= 0 || d > c.q.MaxTimeout() {
		return defaults.Invalid("d", "%v is not in (0, %v]", d, c.q.MaxTimeout())
	}
	deadline := c.cfg.Clock.Now().Add(d)
	next, err := c.relocate(ctx, t, deadline, taskindex.InFlight, nil)
	if err != nil {
		return err
	}
	t.marker, t.Deadline = next, deadline
	return nil
}

// relocate replaces a task's marker with one visible at at, in state (in flight for an
// extension, retrying for a retry), telling the index first. When both lie in the same
// partition, one conditional batch does it. Otherwise the new marker is written first and
// the old one deleted conditionally; if the old one was gone, the new one is deleted
// again. A crash or an unsettled outcome in between leaves both: a duplicate, never a
// loss. Headers, when not nil, replace the marker's.
func (c *Consumer) relocate(ctx context.Context, t *Task, at time.Time, state taskindex.State, headers map[string]string) (taskrow.Row, error) {
	// The marker is placed by the queue's layouts, which must be at most
	// shardqtype.SettingsRefresh old (see internal/layouts).
	if _, err := c.state.Layouts(ctx, c.cfg.Queue); err != nil {
		return t.marker, fmt.Errorf("consumer: moving the lease of %s: %w", t.ID, err)
	}
	next := c.marker(t.marker, at)
	next.Retrying = state == taskindex.Retrying
	if headers != nil {
		next.Headers = headers
	}
	moved := *t
	moved.Deadline = at
	t.steps++
	entry := c.moveEntry(&moved, state, next, taskindex.InFlight, t.marker, taskindex.MoveStep(t.steps))
	if _, err := c.state.Store.Index().Write(ctx, []taskindex.Write{entry}, 1); err != nil {
		return t.marker, fmt.Errorf("consumer: moving the lease of %s: %w", t.ID, err)
	}
	var write func(context.Context) (bool, error)
	if next.Key == t.marker.Key {
		write = func(ctx context.Context) (bool, error) {
			return c.leasing.ReplaceMarker(ctx, t.marker, next)
		}
	} else {
		ts, err := c.writeMarkers(ctx, []taskrow.Row{next}, nil)
		if err != nil {
			c.dropMarkers(ctx, []taskrow.Row{next}, ts)
			return t.marker, fmt.Errorf("consumer: moving the lease of %s: %w", t.ID, err)
		}
		write = func(ctx context.Context) (bool, error) {
			applied, err := c.leasing.DeleteMarker(ctx, t.marker)
			if (err == nil && !applied) || lwt.Definite(err) {
				c.dropMarkers(ctx, []taskrow.Row{next}, ts)
			}
			return applied, err
		}
	}
	if c.crashed("relocate") {
		return t.marker, errCrashed
	}
	if next.Key == t.marker.Key {
		// The batch may apply whatever it returns; writeMarkers touches in the other case.
		defer c.touch(ctx, []taskrow.Row{next})
	}
	applied, err := lwt.Apply(ctx, write, func(rctx context.Context, cause error) (bool, error) {
		// The old marker gone before its deadline means this holder removed it, or a
		// Cancel with AfterLease did; then the new row stays, and the consumer that comes
		// upon it drops it, as the cancel's index entry says the task ended (notEnded).
		there, rerr := c.leasing.MarkersThere(rctx, []taskrow.Row{t.marker})
		if rerr == nil && !there[t.marker.ID] && c.cfg.Clock.Now().Before(t.Deadline) {
			return true, nil
		}
		return false, fmt.Errorf("%w: moving the lease of %s: %w", ErrOutcomeUnknown, t.ID, cause)
	})
	switch {
	case err != nil:
		return t.marker, err
	case !applied:
		c.cfg.Observer.Observe(ctx, shardqtype.LeaseLost{Queue: c.q.Name, TaskID: t.ID})
		return t.marker, ErrLeaseLost
	}
	return next, nil
}

// DeadLetter moves a task that should not run again to the queue's dead letters, with
// cause as its recorded error, and deletes its marker. The dead letter is written first,
// so a failure in between leaves a duplicate, never a lost task. It returns
// ErrLeaseLost (after writing the dead letter) if the lease was already gone.
func (c *Consumer) DeadLetter(ctx context.Context, t *Task, cause error) error {
	if err := c.checkOwn(ctx, t, "t"); err != nil {
		return err
	}
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	now := c.cfg.Clock.Now()
	err := c.state.Store.DeadLetters().Write(ctx, deadletters.Letter{ID: shard.NewID(now), TaskID: t.ID, Queue: c.q.Name,
		Payload: t.Payload, Priority: t.Priority, DueAt: t.DueAt, Timeout: t.Timeout, Attempt: t.Attempt,
		Deliveries: t.Token, Error: msg, DiedAt: now, Headers: t.marker.Headers, Kind: t.marker.Kind})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	err = c.ackOne(ctx, t)
	switch {
	case errors.Is(err, ErrLeaseLost):
		c.cfg.Observer.Observe(ctx, shardqtype.LeaseLost{Queue: c.q.Name, TaskID: t.ID})
	case err == nil:
		c.finish(ctx, []taskindex.Write{c.deadEntry(ctx, t, msg)})
		c.advanceSeries(ctx, []*Task{t}, false)
	}
	return err
}

func (c *Consumer) checkOwn(ctx context.Context, t *Task, name string) error {
	// A task may come from another Consumer of the queue: load the settings if needed.
	if err := c.init(ctx); err != nil {
		return err
	}
	switch {
	case t == nil || t.marker.Key == "":
		return defaults.Invalid(name, "is not a task delivered by AcquireTasks")
	case t.Queue != c.cfg.Queue:
		return defaults.Invalid(name, "belongs to queue %q, not %q", t.Queue, c.cfg.Queue)
	}
	return nil
}
