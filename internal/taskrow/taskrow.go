// Package taskrow is the one place that spells a task row of the tasks table (kind 1),
// for the producer that writes fresh rows and the consumer that swaps them for timeout
// markers, and the statements both send.
package taskrow

import (
	"time"

	"github.com/gocql/gocql"
)

// Row is one task row. ID's time is when the row becomes visible: the due time of a
// pending task, or the lease deadline of a task in flight. Attempt counts deliveries
// since the task was scheduled or replayed: 0 for a task never delivered. Token counts
// every delivery ever, so it keeps growing across replays.
type Row struct {
	Key      string
	Priority int8
	ID       gocql.UUID
	TaskID   gocql.UUID
	Payload  []byte
	DueAt    time.Time
	Timeout  time.Duration
	Attempt  int
	Token    int64
	// Keyed says the task has a unique key: its end is recorded for key claims.
	Keyed bool
	// Series names the recurring series the task is an occurrence of, if any.
	Series string
	// Retrying marks a marker that waits out a retry delay, not a lease.
	Retrying bool
	// Headers are the task's metadata, kept with every copy of its row; nil when it has none.
	Headers map[string]string
	// Kind is the task's kind, kept with every copy of its row; empty when it has none.
	Kind string
}

// HeaderBytes is what headers count toward a task's size: the bytes of their keys and
// values.
func HeaderBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// Size is what r weighs in a batch or a read: its payload, headers and kind.
func (r Row) Size() int { return len(r.Payload) + HeaderBytes(r.Headers) + len(r.Kind) }

// LockID is the clustering id of a partition's lock row (kind 0, priority 0): a fixed,
// valid version 1 UUID.
var LockID = gocql.UUID{0, 0, 0, 0, 0, 0, 0x10, 0, 0x80}

const (
	insertCols = `INSERT INTO tasks (shard_key, kind, priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries`
	insertVals = `) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?`
)

// Insert returns the statement writing r with write timestamp ts, in microseconds (see
// clustertime.Clock.Stamp: rows are deleted by lightweight transactions, stamped by
// coordinators, which must win over the insert).
func (r Row) Insert(ts int64) (string, []any) {
	stmt, args := r.InsertLWT()
	return stmt + ` USING TIMESTAMP ?`, append(args, ts)
}

// InsertLWT returns the statement writing r inside a conditional batch, which carries
// no timestamps of its own. Only a keyed row writes the keyed column, and only an
// occurrence of a series the series column, only a retry the retrying column, only a
// task with headers the headers column, and only a task with a kind the task_kind column,
// so other rows cost no cell for them.
func (r Row) InsertLWT() (string, []any) {
	args := []any{r.Key, r.Priority, r.ID, r.TaskID, r.Payload, r.DueAt, r.Timeout.Milliseconds(), r.Attempt, r.Token}
	cols, vals := insertCols, insertVals
	if r.Keyed {
		cols, vals = cols+`, keyed`, vals+`, true`
	}
	if r.Series != "" {
		cols, vals = cols+`, series`, vals+`, ?`
		args = append(args, r.Series)
	}
	if r.Retrying {
		cols, vals = cols+`, retrying`, vals+`, true`
	}
	if len(r.Headers) > 0 {
		cols, vals = cols+`, headers`, vals+`, ?`
		args = append(args, r.Headers)
	}
	if r.Kind != "" {
		cols, vals = cols+`, task_kind`, vals+`, ?`
		args = append(args, r.Kind)
	}
	return cols + vals + `)`, args
}

// Delete removes a row; DeleteIfExists removes it only if it is there, so its
// applied flag tells whether it was.
const (
	Delete         = `DELETE FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`
	DeleteIfExists = Delete + ` IF EXISTS`
)

// KeyArgs binds r's primary key to Delete and DeleteIfExists.
func (r Row) KeyArgs() []any { return []any{r.Key, r.Priority, r.ID} }

// DeleteAt returns the statement deleting r with write timestamp ts, in microseconds: the
// stamp r was written with, so that the delete wins over it whatever the clock of the
// host that deletes (a tombstone wins a tie).
func (r Row) DeleteAt(ts int64) (string, []any) {
	return `DELETE FROM tasks USING TIMESTAMP ? WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`,
		[]any{ts, r.Key, r.Priority, r.ID}
}

// SelectRange reads up to LIMIT rows of the given priorities (bind a []int8) whose IDs
// lie in (floor, upper], highest priority first, then earliest. Bind the floor as an
// exact ID or shard.MinID(t), and the upper bound as shard.MaxID(t).
const SelectRange = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`

// SelectRangeIDs is SelectRange reading only priorities and IDs.
const SelectRangeIDs = `SELECT priority, id FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`

// SelectOne reads one row's ID by primary key.
const SelectOne = `SELECT id FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`

// SelectAnyPriority reads the row of an ID whatever its priority (bind a []int8 of every
// priority), in SelectRange's columns.
const SelectAnyPriority = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id = ?`

// SelectRow reads one whole row by primary key, in SelectRange's columns; bind KeyArgs.
const SelectRow = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`

// Scan reads the rows of a SelectRange query of partition key, stopping once the rows
// read hold maxBytes of payload and headers or more (the row that crosses it is kept).
// It reports whether it stopped early.
func Scan(iter *gocql.Iter, key string, maxBytes int) (rows []Row, cut bool, err error) {
	var r Row
	var timeoutMs int64
	bytes := 0
	for iter.Scan(&r.Priority, &r.ID, &r.TaskID, &r.Payload, &r.DueAt, &timeoutMs, &r.Attempt, &r.Token, &r.Keyed, &r.Series, &r.Retrying, &r.Headers, &r.Kind) {
		r.Key = key
		r.Timeout = time.Duration(timeoutMs) * time.Millisecond
		rows = append(rows, r)
		bytes += r.Size()
		r = Row{}
		if bytes >= maxBytes {
			cut = true
			break
		}
	}
	return rows, cut, iter.Close()
}

// Batches to one partition stay under these, well inside Cassandra's mutation limits.
const (
	MaxBatchRows  = 100
	MaxBatchBytes = 512 << 10
)

// Group splits row indexes into per-partition batches of at most MaxBatchRows rows and
// MaxBatchBytes of payload and headers (a single larger row gets a batch of its own).
func Group(rows []Row) [][]int {
	type open struct{ idx, bytes int }
	var batches [][]int
	current := map[string]open{}
	for i, r := range rows {
		o, ok := current[r.Key]
		if ok && (len(batches[o.idx]) >= MaxBatchRows || o.bytes+r.Size() > MaxBatchBytes) {
			ok = false
		}
		if !ok {
			batches = append(batches, nil)
			o = open{idx: len(batches) - 1}
		}
		batches[o.idx] = append(batches[o.idx], i)
		o.bytes += r.Size()
		current[r.Key] = o
	}
	return batches
}
