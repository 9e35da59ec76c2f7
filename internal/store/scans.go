package store

import (
	"context"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/taskrow"
)

type scans cassandra

const (
	// tallyStmt reads what a row counts as, and no more: a pass over a backlog moves
	// keys and counters only.
	tallyStmt = `SELECT priority, id, attempt, retrying FROM tasks
		WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ?`
	headsStmt = `SELECT priority, id, task_id, due_at, timeout_ms, attempt, deliveries FROM tasks
		WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`
	taskIDsStmt = `SELECT task_id FROM tasks WHERE shard_key = ? AND kind = 1`
)

func (s scans) Tally(ctx context.Context, key string, prios []int8, from, to uuid.UUID, pageRows int, fn func(taskrow.Row)) error {
	iter := cql.Query(s.session, tallyStmt, key, prios, gocql.UUID(from), gocql.UUID(to)).
		WithContext(ctx).PageSize(pageRows).Iter()
	r := taskrow.Row{Key: key}
	var id gocql.UUID
	for iter.Scan(&r.Priority, &id, &r.Attempt, &r.Retrying) {
		r.ID = uuid.UUID(id)
		fn(r)
	}
	return iter.Close()
}

func (s scans) Heads(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]taskrow.Row, error) {
	iter := cql.Query(s.session, headsStmt, key, prios, gocql.UUID(from), gocql.UUID(to), limit).WithContext(ctx).Iter()
	var rows []taskrow.Row
	r := taskrow.Row{Key: key}
	var timeoutMs int64
	var id, taskID gocql.UUID
	for iter.Scan(&r.Priority, &id, &taskID, &r.DueAt, &timeoutMs, &r.Attempt, &r.Token) {
		r.ID, r.TaskID = uuid.UUID(id), uuid.UUID(taskID)
		r.Timeout = time.Duration(timeoutMs) * time.Millisecond
		rows = append(rows, r)
	}
	return rows, iter.Close()
}

func (s scans) TaskIDs(ctx context.Context, key string, pageRows int, fn func(uuid.UUID)) error {
	iter := cql.Query(s.session, taskIDsStmt, key).WithContext(ctx).PageSize(pageRows).Iter()
	for id := (gocql.UUID{}); iter.Scan(&id); {
		fn(uuid.UUID(id))
	}
	return iter.Close()
}
