package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shard"
)

type letters struct{ session driver.Session }

const (
	letterColumns = `dead_id, task_id, payload, priority, due_at, timeout_ms, attempt, deliveries, error, died_at`
	// insertLetter writes the headers and task_kind cells only when the letter has them, so a
	// letter without costs none.
	insertLetter      = `INSERT INTO dead_letters (queue, day, ` + letterColumns
	pageLetters       = `SELECT ` + letterColumns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? LIMIT ?`
	pageLettersBefore = `SELECT ` + letterColumns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? AND dead_id < ? LIMIT ?`
	oneLetter         = `SELECT ` + letterColumns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? AND dead_id = ?`
	letterIDs         = `SELECT dead_id FROM dead_letters WHERE queue = ? AND day = ?`
	removeLetter      = `DELETE FROM dead_letters USING TIMESTAMP ? WHERE queue = ? AND day = ? AND dead_id = ?`
)

// Write stores l. It is stamped by the coordinator, as the ack that follows it is.
func (d letters) Write(ctx context.Context, l deadletters.Letter) error {
	cols, vals := insertLetter, `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?`
	args := []any{l.Queue, deadletters.Day(shard.IDTime(l.ID)), l.ID, l.TaskID, l.Payload,
		int8(l.Priority), l.DueAt, l.Timeout.Milliseconds(), l.Attempt, l.Deliveries, l.Error, l.DiedAt}
	if len(l.Headers) > 0 {
		cols, vals, args = cols+`, headers`, vals+`, ?`, append(args, l.Headers)
	}
	if l.Kind != "" {
		cols, vals, args = cols+`, task_kind`, vals+`, ?`, append(args, l.Kind)
	}
	err := d.session.Exec(ctx, driver.Statement{CQL: cols + vals + `)`, Args: args, CoordinatorTime: true})
	if err != nil {
		return fmt.Errorf("deadletters: writing dead letter of %s: %w", l.TaskID, err)
	}
	return nil
}

// Page returns up to limit of queue's letters, newest first, older than after (none
// when uuid.Nil), among those kept at now.
func (d letters) Page(ctx context.Context, queue string, now time.Time, after uuid.UUID, limit int) ([]deadletters.Letter, error) {
	today := deadletters.Day(now)
	day := today
	if after != uuid.Nil {
		day = min(day, deadletters.Day(shard.IDTime(after)))
	}
	var out []deadletters.Letter
	for ; day > today-deadletters.Days && len(out) < limit; day-- {
		st := driver.Statement{CQL: pageLetters, Args: []any{queue, day, limit - len(out)}}
		if after != uuid.Nil && day == deadletters.Day(shard.IDTime(after)) {
			st = driver.Statement{CQL: pageLettersBefore, Args: []any{queue, day, after, limit - len(out)}}
		}
		letters, err := scanLetters(d.session.Iter(ctx, st), queue)
		if err != nil {
			return nil, err
		}
		out = append(out, letters...)
	}
	return out, nil
}

// Get returns queue's letter id, and false when it is not kept.
func (d letters) Get(ctx context.Context, queue string, id uuid.UUID) (deadletters.Letter, bool, error) {
	letters, err := scanLetters(d.session.Iter(ctx, driver.Statement{CQL: oneLetter, Args: []any{queue, deadletters.Day(shard.IDTime(id)), id}}), queue)
	if err != nil || len(letters) == 0 {
		return deadletters.Letter{}, false, err
	}
	return letters[0], true, nil
}

// Delete removes queue's letter id at write timestamp stamp, in microseconds
// (clustertime.Clock.DeleteStamp): the letter was stamped by a coordinator, so a delete
// stamped by a host whose clock trails the servers' would be shadowed by it.
func (d letters) Delete(ctx context.Context, queue string, id uuid.UUID, stamp int64) error {
	if err := d.session.Exec(ctx, driver.Statement{CQL: removeLetter, Args: []any{stamp, queue, deadletters.Day(shard.IDTime(id)), id}}); err != nil {
		return fmt.Errorf("deadletters: deleting dead letter %s: %w", id, err)
	}
	return nil
}

// Count counts queue's letters kept at now, reading pages of pageSize rows, and calls
// done after each day's partition.
func (d letters) Count(ctx context.Context, queue string, now time.Time, pageSize int, done func()) (int, error) {
	today := deadletters.Day(now)
	n := 0
	for day := today - deadletters.Days + 1; day <= today; day++ {
		iter := d.session.Iter(ctx, driver.Statement{CQL: letterIDs, Args: []any{queue, day}, PageSize: pageSize})
		var id uuid.UUID
		for iter.Scan(&id) {
			n++
		}
		if err := iter.Close(); err != nil {
			return 0, fmt.Errorf("deadletters: counting dead letters of day %d: %w", day, err)
		}
		done()
	}
	return n, nil
}

func scanLetters(iter driver.Iter, queue string) ([]deadletters.Letter, error) {
	var out []deadletters.Letter
	l := deadletters.Letter{Queue: queue}
	var id, taskID uuid.UUID
	var prio int8
	var timeoutMs int64
	for iter.Scan(&id, &taskID, &l.Payload, &prio, &l.DueAt, &timeoutMs, &l.Attempt, &l.Deliveries, &l.Error, &l.DiedAt, &l.Headers, &l.Kind) {
		l.ID, l.TaskID, l.Priority = id, taskID, int(prio)
		l.Timeout = time.Duration(timeoutMs) * time.Millisecond
		out = append(out, l)
		l = deadletters.Letter{Queue: queue}
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("deadletters: reading dead letters of %q: %w", queue, err)
	}
	return out, nil
}
