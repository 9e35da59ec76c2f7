// Package deadletters is the store of the dead_letters table: every statement on it, and
// how long letters are kept. Consumers write letters, producers list, replay and purge
// them, the inspector counts them; all through here.
package deadletters

import (
	"context"
	"fmt"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/shard"
)

// Retention is how long a letter is kept: the table's default_time_to_live (schema.cql).
const Retention = 30 * 24 * time.Hour

// Days is how many daily partitions can hold live letters: a letter's time to live runs
// from its write, so the partition of the day Retention ago still holds the letters of its
// later hours.
const Days = int(Retention/(24*time.Hour)) + 1

// Day is the partition (UTC days since the epoch) of letters that died at t.
func Day(t time.Time) int { return int(t.Unix() / 86400) }

// Letter is one row: a task that died, with the error it died of.
type Letter struct {
	// ID identifies the letter; its time is when the task died.
	ID         uuid.UUID
	TaskID     uuid.UUID
	Queue      string
	Payload    []byte
	Priority   int
	DueAt      time.Time
	Timeout    time.Duration
	Attempt    int
	Deliveries int64 // the fencing token of the task's last delivery
	Error      string
	DiedAt     time.Time
	Headers    map[string]string // the task's; nil when it had none
	Kind       string            // the task's; empty when it had none
}

const (
	columns = `dead_id, task_id, payload, priority, due_at, timeout_ms, attempt, deliveries, error, died_at`
	// insert writes the headers and task_kind cells only when the letter has them, so a
	// letter without costs none.
	insert = `INSERT INTO dead_letters (queue, day, ` + columns
	page   = `SELECT ` + columns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? LIMIT ?`
	before = `SELECT ` + columns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? AND dead_id < ? LIMIT ?`
	one    = `SELECT ` + columns + `, headers, task_kind FROM dead_letters WHERE queue = ? AND day = ? AND dead_id = ?`
	ids    = `SELECT dead_id FROM dead_letters WHERE queue = ? AND day = ?`
	remove = `DELETE FROM dead_letters USING TIMESTAMP ? WHERE queue = ? AND day = ? AND dead_id = ?`
)

// Write stores l. It is stamped by the coordinator, as the ack that follows it is.
func Write(ctx context.Context, session *gocql.Session, l Letter) error {
	cols, vals := insert, `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?`
	args := []any{l.Queue, Day(shard.IDTime(l.ID)), gocql.UUID(l.ID), gocql.UUID(l.TaskID), l.Payload,
		int8(l.Priority), l.DueAt, l.Timeout.Milliseconds(), l.Attempt, l.Deliveries, l.Error, l.DiedAt}
	if len(l.Headers) > 0 {
		cols, vals, args = cols+`, headers`, vals+`, ?`, append(args, l.Headers)
	}
	if l.Kind != "" {
		cols, vals, args = cols+`, task_kind`, vals+`, ?`, append(args, l.Kind)
	}
	err := cql.Query(session, cols+vals+`)`, args...).WithContext(ctx).DefaultTimestamp(false).Exec()
	if err != nil {
		return fmt.Errorf("deadletters: writing dead letter of %s: %w", l.TaskID, err)
	}
	return nil
}

// Page returns up to limit of queue's letters, newest first, older than after (none
// when uuid.Nil), among those kept at now.
func Page(ctx context.Context, session *gocql.Session, queue string, now time.Time, after uuid.UUID, limit int) ([]Letter, error) {
	today := Day(now)
	day := today
	if after != uuid.Nil {
		day = min(day, Day(shard.IDTime(after)))
	}
	var out []Letter
	for ; day > today-Days && len(out) < limit; day-- {
		q := cql.Query(session, page, queue, day, limit-len(out))
		if after != uuid.Nil && day == Day(shard.IDTime(after)) {
			q = cql.Query(session, before, queue, day, gocql.UUID(after), limit-len(out))
		}
		letters, err := scan(q.WithContext(ctx).Iter(), queue)
		if err != nil {
			return nil, err
		}
		out = append(out, letters...)
	}
	return out, nil
}

// Get returns queue's letter id, and false when it is not kept.
func Get(ctx context.Context, session *gocql.Session, queue string, id uuid.UUID) (Letter, bool, error) {
	letters, err := scan(cql.Query(session, one, queue, Day(shard.IDTime(id)), gocql.UUID(id)).WithContext(ctx).Iter(), queue)
	if err != nil || len(letters) == 0 {
		return Letter{}, false, err
	}
	return letters[0], true, nil
}

// Delete removes queue's letter id at write timestamp stamp, in microseconds
// (clustertime.Clock.DeleteStamp): the letter was stamped by a coordinator, so a delete
// stamped by a host whose clock trails the servers' would be shadowed by it.
func Delete(ctx context.Context, session *gocql.Session, queue string, id uuid.UUID, stamp int64) error {
	if err := cql.Query(session, remove, stamp, queue, Day(shard.IDTime(id)), gocql.UUID(id)).WithContext(ctx).Exec(); err != nil {
		return fmt.Errorf("deadletters: deleting dead letter %s: %w", id, err)
	}
	return nil
}

// Count counts queue's letters kept at now, reading pages of pageSize rows, and calls
// done after each day's partition.
func Count(ctx context.Context, session *gocql.Session, queue string, now time.Time, pageSize int, done func()) (int, error) {
	today := Day(now)
	n := 0
	for day := today - Days + 1; day <= today; day++ {
		iter := cql.Query(session, ids, queue, day).WithContext(ctx).PageSize(pageSize).Iter()
		var id gocql.UUID
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

func scan(iter *gocql.Iter, queue string) ([]Letter, error) {
	var out []Letter
	l := Letter{Queue: queue}
	var id, taskID gocql.UUID
	var prio int8
	var timeoutMs int64
	for iter.Scan(&id, &taskID, &l.Payload, &prio, &l.DueAt, &timeoutMs, &l.Attempt, &l.Deliveries, &l.Error, &l.DiedAt, &l.Headers, &l.Kind) {
		l.ID, l.TaskID, l.Priority = uuid.UUID(id), uuid.UUID(taskID), int(prio)
		l.Timeout = time.Duration(timeoutMs) * time.Millisecond
		out = append(out, l)
		l = Letter{Queue: queue}
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("deadletters: reading dead letters of %q: %w", queue, err)
	}
	return out, nil
}
