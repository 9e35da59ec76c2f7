package producer

import (
	"context"
	"fmt"

	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shardqtype"
)

// dropStray deletes l.Stray, a row written ahead of a move out of l.Row (a consumer's
// timeout marker, or a Reschedule's new row) whose conditional step did not apply: its
// process died, or its outcome stayed unknown. Left alone, it would deliver the task at
// its time after a Cancel, or beside the row a Reschedule moves.
//
// Both kinds of move apply only under the lock of l.Row's partition, and delete l.Row
// when they do. So while we hold that lock and l.Row is still there, the move never
// applied and never will, and the stray is not the task. The stray's partition is locked
// too, so no consumer takes it meanwhile. Deleting it first keeps every step safe: a
// crash after it leaves the task pending at l.Row, and the caller's own move follows.
// A stray that is gone already was deleted by its writer or taken by a consumer when it
// came due; the caller looks again either way.
func (p *Producer) dropStray(ctx context.Context, q shardqtype.QueueConfig, l tasklookup.Found) error {
	m, err := p.lockMove(ctx, q, l.Row.Key, l.Stray.Key, nil)
	if err != nil {
		return err
	}
	defer m.release(ctx)
	// At SERIAL, so a move that applied before we took the lock is seen.
	there, err := p.store.Tasks().Exists(ctx, l.Row)
	switch {
	case err != nil:
		return fmt.Errorf("reading %s: %w", l.Row.Key, err)
	case !there:
		return nil // the move applied after all: the "stray" is the task
	}
	return p.deleteStray(ctx, *l.Stray)
}

// deleteStray deletes the stray row r of a move that did not apply and never will, while
// we hold the lock of its partition, so no consumer takes it meanwhile. Gone already
// (its writer dropped it), it is as good as deleted.
func (p *Producer) deleteStray(ctx context.Context, r taskrow.Row) error {
	tasks := p.store.Tasks()
	_, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		return tasks.DeleteIfExists(ctx, r)
	}, func(rctx context.Context, cause error) (bool, error) {
		there, rerr := tasks.Exists(rctx, r)
		switch {
		case rerr == nil && !there:
			return true, nil
		case rerr == nil:
			return false, fmt.Errorf("deleting the stray row %s of a move that did not apply: %w", r.Key, cause)
		}
		return false, fmt.Errorf("%w: deleting the stray row %s of a move that did not apply: %w (reading back: %w)",
			lwt.ErrOutcomeUnknown, r.Key, cause, rerr)
	})
	return err
}
