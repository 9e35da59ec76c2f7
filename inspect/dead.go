package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// Limits of DeadLetterQuery.
const (
	DefaultDeadLetterLimit = 100
	MaxDeadLetterLimit     = 1000
)

// DeadLetterQuery selects a page of dead letters.
type DeadLetterQuery struct {
	// Limit is the most letters returned, at most MaxDeadLetterLimit.
	// Defaults to DefaultDeadLetterLimit.
	Limit int
	// Before returns only letters older than this one: pass the DeadLetterID of the last
	// letter of the previous page. Defaults to the newest (uuid.Nil).
	Before uuid.UUID
}

// DeadLetters returns a page of queue's dead letters, newest first, each a TaskInfo in
// state TaskDead with its DeadLetterID, LastError and FinishedAt (when it died). Pass the
// DeadLetterID of a page's last letter as q.Before to get the next; an empty page is the
// end. Letters are kept 30 days.
func (in *Inspector) DeadLetters(ctx context.Context, queue string, q DeadLetterQuery) ([]shardqtype.TaskInfo, error) {
	if q.Limit == 0 {
		q.Limit = DefaultDeadLetterLimit
	}
	if q.Limit < 0 || q.Limit > MaxDeadLetterLimit {
		return nil, defaults.Invalid("q.Limit", "%d is not in [1, %d]", q.Limit, MaxDeadLetterLimit)
	}
	if q.Before != uuid.Nil {
		if err := checkID("q.Before", q.Before); err != nil {
			return nil, err
		}
	}
	if _, err := in.queue(ctx, queue); err != nil {
		return nil, err
	}
	letters, err := in.state.Store.DeadLetters().Page(ctx, queue, in.cfg.Clock.Now(), q.Before, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	out := make([]shardqtype.TaskInfo, len(letters))
	for i, l := range letters {
		out[i] = deadInfo(l)
	}
	return out, nil
}

// DeadLetter returns queue's dead letter id as DeadLetters does, or an error matching
// producer.ErrDeadLetterNotFound when it is not kept.
func (in *Inspector) DeadLetter(ctx context.Context, queue string, id uuid.UUID) (*shardqtype.TaskInfo, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	l, ok, err := in.state.Store.DeadLetters().Get(ctx, queue, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("inspect: %w", err)
	case !ok:
		return nil, fmt.Errorf("%w: %s in queue %q", producer.ErrDeadLetterNotFound, id, queue)
	}
	info := deadInfo(l)
	return &info, nil
}

// CountDeadLetters counts the dead letters kept for queue, reading their IDs only.
func (in *Inspector) CountDeadLetters(ctx context.Context, queue string) (int, error) {
	q, err := in.queue(ctx, queue)
	if err != nil {
		return 0, err
	}
	return in.countDead(ctx, q, in.cfg.Clock.Now(), func() {})
}

// countDead counts q's dead letters kept at now, calling done after each day's partition.
func (in *Inspector) countDead(ctx context.Context, q queueRead, now time.Time, done func()) (int, error) {
	return in.state.Store.DeadLetters().Count(ctx, q.cfg.Name, now, in.cfg.PageSize, done)
}

// deadInfo is dead letter l as a task read back.
func deadInfo(l deadletters.Letter) shardqtype.TaskInfo {
	return shardqtype.TaskInfo{ID: l.TaskID, Queue: l.Queue, State: shardqtype.TaskDead, DueAt: l.DueAt, Priority: l.Priority,
		Attempt: l.Attempt, Token: l.Deliveries, Timeout: l.Timeout, LastError: l.Error, FinishedAt: l.DiedAt,
		DeadLetterID: l.ID, Payload: l.Payload, Headers: l.Headers, Kind: l.Kind}
}

// checkID refuses an ID that no task or dead letter has: IDs are version 1 UUIDs.
func checkID(field string, id uuid.UUID) error {
	if id.Version() != 1 {
		return defaults.Invalid(field, "%s is not a dead letter ID (a version 1 UUID)", id)
	}
	return nil
}
