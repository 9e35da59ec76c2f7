// Package taskrow is the one place that spells a task row of the tasks table (kind 1),
// for the producer that writes fresh rows and the consumer that swaps them for leases.
package taskrow

import (
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq"
)

// Row is one task row. ID's time is when the row becomes visible: the due time of a
// pending task, or the lease deadline of a task in flight. Attempt counts deliveries
// so far: 0 for a task never delivered.
type Row struct {
	Key      string
	Priority int8
	ID       gocql.UUID
	TaskID   gocql.UUID
	Payload  []byte
	DueAt    time.Time
	Timeout  time.Duration
	Attempt  int
}

// LockID is the clustering id of a partition's lock row (kind 0, priority 0): a fixed,
// valid version 1 UUID.
var LockID = gocql.UUID{0, 0, 0, 0, 0, 0, 0x10, 0, 0x80}

// Insert writes a row.
const Insert = `INSERT INTO tasks (shard_key, kind, priority, id, task_id, payload, due_at, timeout_ms, attempt)
	VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)`

// InsertArgs binds r to Insert.
func (r Row) InsertArgs() []any {
	return []any{r.Key, r.Priority, r.ID, r.TaskID, r.Payload, r.DueAt, r.Timeout.Milliseconds(), r.Attempt}
}

// Delete removes a row; DeleteIfExists removes it only if it is there, so its
// applied flag tells whether it was.
const (
	Delete         = `DELETE FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`
	DeleteIfExists = Delete + ` IF EXISTS`
)

// KeyArgs binds r's primary key to Delete and DeleteIfExists.
func (r Row) KeyArgs() []any { return []any{r.Key, r.Priority, r.ID} }

// priorities lists every priority, highest first: the table's clustering order, so one
// read with this IN list returns rows highest priority first, then by ID time.
var priorities = func() string {
	var p []string
	for i := shardq.MaxPriority; i >= shardq.MinPriority; i-- {
		p = append(p, strconv.Itoa(i))
	}
	return strings.Join(p, ",")
}()

// SelectVisible reads up to LIMIT rows of a partition whose ID time is at most the bound
// (bind shard.MaxID(now)): due pending tasks and expired leases, highest priority first,
// then earliest. Rows due later never count toward the limit.
var SelectVisible = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN (` + priorities + `) AND id <= ? LIMIT ?`

// SelectBefore reads the IDs of up to LIMIT rows whose ID time is before the bound (bind
// shard.MinID(t)), visible or not, highest priority first.
var SelectBefore = `SELECT id FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN (` + priorities + `) AND id < ? LIMIT ?`

// SelectOne reads one row's ID by primary key.
const SelectOne = `SELECT id FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`

// Scan reads the rows of a SelectVisible query of partition key.
func Scan(iter *gocql.Iter, key string) ([]Row, error) {
	var rows []Row
	var r Row
	var timeoutMs int64
	for iter.Scan(&r.Priority, &r.ID, &r.TaskID, &r.Payload, &r.DueAt, &timeoutMs, &r.Attempt) {
		r.Key = key
		r.Timeout = time.Duration(timeoutMs) * time.Millisecond
		rows = append(rows, r)
		r = Row{}
	}
	return rows, iter.Close()
}
