package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shardqtype"
)

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

// AckTasks marks tasks done by deleting their timeout markers: one conditional batch per
// partition. A task whose lease was lost is listed in an *AckError (ErrLeaseLost); the
// others are acked all the same.
func (c *Consumer) AckTasks(ctx context.Context, tasks ...*Task) error {
	groups := map[string][]*Task{}
	var keys []string
	for i, t := range tasks {
		if err := c.checkOwn(ctx, t, fmt.Sprintf("tasks[%d]", i)); err != nil {
			return err
		}
		if _, ok := groups[t.marker.Key]; !ok {
			keys = append(keys, t.marker.Key)
		}
		groups[t.marker.Key] = append(groups[t.marker.Key], t)
	}
	// By delivery, not task ID: two deliveries of one task (the first's lease ran out)
	// can be acked in one call, the first lost and the second acked.
	var mu sync.Mutex
	lost, failed := map[*Task]bool{}, map[*Task]error{}
	_ = fanout.Each(len(keys), c.cfg.PartitionsInFlight, func(i int) error {
		l, f := c.ackGroup(ctx, groups[keys[i]])
		mu.Lock()
		defer mu.Unlock()
		for _, t := range l {
			lost[t] = true
		}
		for t, err := range f {
			failed[t] = err
		}
		return nil
	})
	ackErr := &AckError{Failed: map[uuid.UUID]error{}}
	var done []taskindex.Write
	var acked []*Task
	for _, t := range tasks {
		switch err, ok := failed[t]; {
		case ok:
			ackErr.Failed[t.ID] = err
		case lost[t]:
			ackErr.Lost = append(ackErr.Lost, t.ID)
		default:
			done = append(done, c.finishEntry(t, taskindex.Completed, ""))
			acked = append(acked, t)
		}
	}
	c.finish(ctx, done)
	c.advanceSeries(ctx, acked, false)
	if len(done) > 0 {
		ids := make([]uuid.UUID, len(acked))
		for i, t := range acked {
			ids[i] = t.ID
		}
		c.cfg.Observer.Observe(ctx, shardqtype.Acked{Queue: c.q.Name, Count: len(done), TaskIDs: ids})
	}
	for _, id := range ackErr.Lost {
		c.cfg.Observer.Observe(ctx, shardqtype.LeaseLost{Queue: c.q.Name, TaskID: id})
	}
	if len(ackErr.Lost) == 0 && len(ackErr.Failed) == 0 {
		return nil
	}
	return ackErr
}

// ackGroup acks tasks of one partition. When the batch fails a condition, at least one
// lease is gone; acking one by one tells which. When its outcome is unknown, it may have
// applied: a marker gone before its deadline was then deleted by it, since no one else
// may take a task before its deadline, and one SERIAL read of the markers tells which
// tasks are left to ack one by one.
func (c *Consumer) ackGroup(ctx context.Context, tasks []*Task) (lost []*Task, failed map[*Task]error) {
	failed = map[*Task]error{}
	batchUnknown := false
	if len(tasks) > 1 {
		applied, err := c.leasing.DeleteMarkers(ctx, markersOf(tasks))
		if c.afterAck != nil {
			err = c.afterAck(err)
		}
		if err == nil && applied {
			return nil, nil
		}
		if batchUnknown = err != nil; batchUnknown {
			if left, rerr := c.leftToAck(ctx, tasks); rerr == nil {
				tasks = left
			} else {
				c.log.WarnContext(ctx, "reading back the markers of an ack batch; acking one by one",
					"partition_key", tasks[0].marker.Key, "error", rerr)
			}
		}
	}
	for _, t := range tasks {
		err := c.ackOne(ctx, t)
		if errors.Is(err, ErrLeaseLost) && batchUnknown && c.cfg.Clock.Now().Before(t.Deadline) {
			err = nil
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			lost = append(lost, t)
		case err != nil:
			failed[t] = err
		}
	}
	return lost, failed
}

// leftToAck reads the markers of tasks, all in one partition, at SERIAL after an ack
// batch's outcome came back unknown, and returns the tasks the batch did not settle: those
// whose marker is still there, or gone with its deadline passed by the end of the read,
// when another consumer may have taken it.
func (c *Consumer) leftToAck(ctx context.Context, tasks []*Task) ([]*Task, error) {
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	there, err := c.leasing.MarkersThere(rctx, markersOf(tasks))
	if err != nil {
		return nil, err
	}
	now := c.cfg.Clock.Now()
	var left []*Task
	for _, t := range tasks {
		if there[t.marker.ID] || !now.Before(t.Deadline) {
			left = append(left, t)
		}
	}
	return left, nil
}

func markersOf(tasks []*Task) []taskrow.Row {
	markers := make([]taskrow.Row, len(tasks))
	for i, t := range tasks {
		markers[i] = t.marker
	}
	return markers
}

func (c *Consumer) ackOne(ctx context.Context, t *Task) error {
	for range 2 {
		applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
			return c.leasing.DeleteMarker(ctx, t.marker)
		}, func(rctx context.Context, cause error) (bool, error) {
			// A straggling delete can only remove this very marker, so reading it back at
			// SERIAL settles the ack: gone before its deadline means no one else took it.
			there, rerr := c.leasing.MarkersThere(rctx, []taskrow.Row{t.marker})
			switch {
			case rerr != nil:
				return false, fmt.Errorf("%w: ack of %s: %w (reading back: %w)", ErrOutcomeUnknown, t.ID, cause, rerr)
			case !there[t.marker.ID] && c.cfg.Clock.Now().Before(t.Deadline):
				return true, nil
			case !there[t.marker.ID]:
				return false, fmt.Errorf("%w: ack of %s after its deadline: %w", ErrOutcomeUnknown, t.ID, cause)
			}
			return false, errRetryAck // still there: the delete did not apply
		})
		switch {
		case errors.Is(err, errRetryAck):
			continue // trying once more is a new decision, not a blind retry
		case err != nil:
			return err
		case !applied:
			return ErrLeaseLost
		}
		return nil
	}
	return fmt.Errorf("%w: ack of %s failed twice", ErrOutcomeUnknown, t.ID)
}

var errRetryAck = errors.New("consumer: ack did not apply")

// advanceSeries moves the series of occurrences just taken (taken) or finished past
// them, scheduling their next occurrences. A failure leaves the series to the keepers
// of the queue's workers, which find it stalled and move it then.
func (c *Consumer) advanceSeries(ctx context.Context, tasks []*Task, taken bool) {
	for _, t := range tasks {
		if t.Series == "" {
			continue
		}
		if err := c.series.Advance(ctx, c.q, t.Series, t.ID, taken); err != nil {
			c.log.WarnContext(ctx, "scheduling the next occurrence of a series", "queue", c.q.Name,
				"series", t.Series, "task_id", t.ID, "error", err)
		}
	}
}
