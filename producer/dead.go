package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// ErrDeadLetterNotFound means no dead letter of that ID is kept in the queue.
var ErrDeadLetterNotFound = errors.New("producer: dead letter not found")

// deadLetter reads queue's letter id, which ReplayDeadLetter and PurgeDeadLetter act on.
func (p *Producer) deadLetter(ctx context.Context, queue string, id uuid.UUID) (deadletters.Letter, error) {
	if err := tasklookup.CheckID("id", id); err != nil {
		return deadletters.Letter{}, err
	}
	l, ok, err := p.store.DeadLetters().Get(ctx, queue, id)
	switch {
	case err != nil:
		return deadletters.Letter{}, fmt.Errorf("producer: %w", err)
	case !ok:
		return deadletters.Letter{}, fmt.Errorf("%w: %s in queue %q", ErrDeadLetterNotFound, id, queue)
	}
	return l, nil
}

// ReplayDeadLetter puts a dead task back into its queue, due now with its attempts reset
// (its fencing token keeps growing), and removes the dead letter once the task is
// written. It returns the task's ID, which is the one it had. A task that had a unique
// key claims it again, and the replay fails with a *DuplicateError if another task holds
// it. A replay that fails after writing the task leaves the letter: replaying it again
// runs the task twice, never loses it. So do two replays of one letter at once.
func (p *Producer) ReplayDeadLetter(ctx context.Context, queue string, id uuid.UUID) (uuid.UUID, error) {
	q, err := p.queue(ctx, queue)
	if err != nil {
		return uuid.Nil, err
	}
	d, err := p.deadLetter(ctx, queue, id)
	if err != nil {
		return uuid.Nil, err
	}
	// A replay starts its attempts anew, so the deliveries its handlers snoozed are forgotten.
	d.Headers = taskmeta.Without(d.Headers, taskmeta.Snoozes)
	task := Task{Queue: queue, Payload: d.Payload, Priority: d.Priority, Timeout: d.Timeout, Headers: d.Headers, Kind: d.Kind}
	// The replay's token goes above every delivery the index has seen, not only the
	// letter's: a copy the death could not delete (its marker's delete failed) may have
	// been delivered and cancelled since, and an entry at or above the replay's token
	// would end the replay's row before it ran.
	token := d.Deliveries
	if e, stamp, err := p.store.Index().Read(ctx, d.TaskID); err == nil {
		task.Key = e.Key
		token = max(token, e.Token, taskindex.Delivery(d.TaskID, stamp))
	} else if !errors.Is(err, taskindex.ErrNotFound) {
		return uuid.Nil, fmt.Errorf("producer: replaying %s: %w", id, err)
	}
	// The row is made once the key is claimed, from the time then: a row written later
	// than its ID says (by more than consumers' MaxClockSkew) lands below their read
	// floors. The claim reckons its TTL from a row due just before, so it ends short of
	// the row's horizon by the time the claim took.
	now := p.cfg.Clock.Now()
	wctx, cancel, err := p.claimKeys(ctx, []Task{task}, []taskrow.Row{replayRow(p.state.Place(q, now, now), d, task, token, now)}, now)
	if err != nil {
		return uuid.Nil, err
	}
	defer cancel()
	now = p.cfg.Clock.Now()
	row := replayRow(p.state.Place(q, now, now), d, task, token, now)
	if _, err := p.store.Index().Write(wctx, []taskindex.Write{scheduledEntry(task, row, now)}, 1); err != nil {
		return uuid.Nil, fmt.Errorf("producer: replaying %s: %w", id, err)
	}
	ins := store.Mutation{Op: store.Insert, Row: row, Stamp: p.cluster.Stamp(p.cfg.Clock.Now())}
	if err := p.store.Tasks().Write(wctx, []store.Mutation{ins}); err != nil {
		return uuid.Nil, fmt.Errorf("producer: replaying %s: %w", id, err)
	}
	p.wake(ctx, []Task{task}, []taskrow.Row{row}, []shardqtype.QueueConfig{q})
	if err := p.dropDead(ctx, d); err != nil {
		return d.TaskID, fmt.Errorf("producer: task %s is replayed, but its dead letter stays: %w", d.TaskID, err)
	}
	return d.TaskID, nil
}

// replayRow is the row that puts dead letter d back into the queue, laid out by lay, due
// at now, as the delivery after token (the last the task had).
func replayRow(lay shard.Layout, d deadletters.Letter, t Task, token int64, now time.Time) taskrow.Row {
	return taskrow.Row{Key: lay.Key(lay.Bucket(now), lay.ShardFor(d.TaskID)), Priority: int8(d.Priority),
		ID: shard.NewID(now), TaskID: d.TaskID, Payload: d.Payload, DueAt: now,
		Timeout: d.Timeout, Token: token + 1, Keyed: t.Key != "", Headers: d.Headers, Kind: d.Kind}
}

// PurgeDeadLetter deletes a dead letter for good; inspect's Task no longer finds its task.
func (p *Producer) PurgeDeadLetter(ctx context.Context, queue string, id uuid.UUID) error {
	d, err := p.deadLetter(ctx, queue, id)
	if err != nil {
		return err
	}
	if err := p.dropDead(ctx, d); err != nil {
		return err
	}
	// Removed at the timestamp of its death's entry: a tie goes to the deletion, and a
	// replay (written later) is untouched.
	gone := taskindex.Write{Entry: taskindex.Entry{TaskID: d.TaskID}, Delete: true,
		Stamp: taskindex.Stamp(d.TaskID, d.Deliveries, taskindex.Final)}
	if _, err := p.store.Index().Write(ctx, []taskindex.Write{gone}, 1); err != nil {
		return fmt.Errorf("producer: purging %s: %w", id, err)
	}
	return nil
}

func (p *Producer) dropDead(ctx context.Context, d deadletters.Letter) error {
	if err := p.store.DeadLetters().Delete(ctx, d.Queue, d.ID, p.cluster.DeleteStamp()); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	return nil
}

// BulkOptions tunes the operations on all of a queue's dead letters.
type BulkOptions struct {
	// Progress, when set, is called after each letter with how many were done so far.
	// Defaults to nil.
	Progress func(done int)
}

// ReplayAllDeadLetters replays every dead letter of queue, newest first, as
// ReplayDeadLetter does, and returns how many it replayed. It stops at the first error.
func (p *Producer) ReplayAllDeadLetters(ctx context.Context, queue string, opts BulkOptions) (int, error) {
	return p.eachDeadLetter(ctx, queue, opts, func(d deadletters.Letter) error {
		_, err := p.ReplayDeadLetter(ctx, queue, d.ID)
		return err
	})
}

// PurgeAllDeadLetters deletes every dead letter of queue for good and returns how many.
func (p *Producer) PurgeAllDeadLetters(ctx context.Context, queue string, opts BulkOptions) (int, error) {
	return p.eachDeadLetter(ctx, queue, opts, func(d deadletters.Letter) error { return p.PurgeDeadLetter(ctx, queue, d.ID) })
}

// bulkPage is how many letters the bulk operations read at once.
const bulkPage = 100

func (p *Producer) eachDeadLetter(ctx context.Context, queue string, opts BulkOptions, do func(deadletters.Letter) error) (int, error) {
	if _, err := p.queue(ctx, queue); err != nil {
		return 0, err
	}
	done := 0
	var before uuid.UUID
	for {
		page, err := p.store.DeadLetters().Page(ctx, queue, p.cfg.Clock.Now(), before, bulkPage)
		if err != nil {
			return done, fmt.Errorf("producer: %w", err)
		}
		if len(page) == 0 {
			return done, nil
		}
		for _, d := range page {
			if err := do(d); err != nil {
				return done, err
			}
			done++
			if opts.Progress != nil {
				opts.Progress(done)
			}
		}
		before = page[len(page)-1].ID
	}
}
