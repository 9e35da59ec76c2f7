package store

import (
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/taskrow"
)

// lockID is taskrow.LockID as the driver binds it.
var lockID = taskrow.LockID

const (
	insertCols = `INSERT INTO tasks (shard_key, kind, priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries`
	insertVals = `) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?`
)

// rowInsert returns the statement writing r with write timestamp ts, in microseconds (see
// clustertime.Clock.Stamp: rows are deleted by lightweight transactions, stamped by
// coordinators, which must win over the insert).
func rowInsert(r taskrow.Row, ts int64) (string, []any) {
	stmt, args := rowInsertLWT(r)
	return stmt + ` USING TIMESTAMP ?`, append(args, ts)
}

// rowInsertLWT returns the statement writing r inside a conditional batch, which carries
// no timestamps of its own. Only a keyed row writes the keyed column, and only an
// occurrence of a series the series column, only a retry the retrying column, only a
// task with headers the headers column, and only a task with a kind the task_kind column,
// so other rows cost no cell for them.
func rowInsertLWT(r taskrow.Row) (string, []any) {
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

// deleteStmt removes a row; deleteIfExistsStmt removes it only if it is there, so its
// applied flag tells whether it was.
const (
	deleteStmt         = `DELETE FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`
	deleteIfExistsStmt = deleteStmt + ` IF EXISTS`
)

// keyArgs binds r's primary key to deleteStmt and deleteIfExistsStmt.
func keyArgs(r taskrow.Row) []any { return []any{r.Key, r.Priority, r.ID} }

// rowDeleteAt returns the statement deleting r with write timestamp ts, in microseconds: the
// stamp r was written with, so that the delete wins over it whatever the clock of the
// host that deletes (a tombstone wins a tie).
func rowDeleteAt(r taskrow.Row, ts int64) (string, []any) {
	return `DELETE FROM tasks USING TIMESTAMP ? WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`,
		[]any{ts, r.Key, r.Priority, r.ID}
}

// selectRange reads up to LIMIT rows of the given priorities (bind a []int8) whose IDs
// lie in (floor, upper], highest priority first, then earliest. Bind the floor as an
// exact ID or shard.MinID(t), and the upper bound as shard.MaxID(t).
const selectRange = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`

// selectRangeIDs is selectRange reading only priorities and IDs.
const selectRangeIDs = `SELECT priority, id FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`

// selectOne reads one row's ID by primary key.
const selectOne = `SELECT id FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`

// selectAnyPriority reads the row of an ID whatever its priority (bind a []int8 of every
// priority), in selectRange's columns.
const selectAnyPriority = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id = ?`

// selectRow reads one whole row by primary key, in selectRange's columns; bind KeyArgs.
const selectRow = `SELECT priority, id, task_id, payload, due_at, timeout_ms, attempt, deliveries, keyed, series, retrying, headers, task_kind FROM tasks
	WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`

// scanRows reads the rows of a selectRange query of partition key, stopping once the rows
// read hold maxBytes of payload and headers or more (the row that crosses it is kept).
// It reports whether it stopped early.
func scanRows(iter driver.Iter, key string, maxBytes int) (rows []taskrow.Row, cut bool, err error) {
	var r taskrow.Row
	var id, taskID uuid.UUID
	var timeoutMs int64
	bytes := 0
	for iter.Scan(&r.Priority, &id, &taskID, &r.Payload, &r.DueAt, &timeoutMs, &r.Attempt, &r.Token, &r.Keyed, &r.Series, &r.Retrying, &r.Headers, &r.Kind) {
		r.Key, r.ID, r.TaskID = key, id, taskID
		r.Timeout = time.Duration(timeoutMs) * time.Millisecond
		rows = append(rows, r)
		bytes += r.Size()
		r = taskrow.Row{}
		if bytes >= maxBytes {
			cut = true
			break
		}
	}
	return rows, cut, iter.Close()
}
