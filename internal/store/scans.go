package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
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
	st := driver.Statement{CQL: tallyStmt, Args: []any{key, prios, from, to}, PageSize: pageRows}
	return eachPage(ctx, s.session, st, func(iter driver.Iter) {
		r := taskrow.Row{Key: key}
		var id uuid.UUID
		for iter.Scan(&r.Priority, &id, &r.Attempt, &r.Retrying) {
			r.ID = id
			fn(r)
		}
	})
}

func (s scans) Heads(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]taskrow.Row, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: headsStmt, Args: []any{key, prios, from, to, limit}})
	var rows []taskrow.Row
	r := taskrow.Row{Key: key}
	var timeoutMs int64
	var id, taskID uuid.UUID
	for iter.Scan(&r.Priority, &id, &taskID, &r.DueAt, &timeoutMs, &r.Attempt, &r.Token) {
		r.ID, r.TaskID = id, taskID
		r.Timeout = time.Duration(timeoutMs) * time.Millisecond
		rows = append(rows, r)
	}
	return rows, iter.Close()
}

func (s scans) TaskIDs(ctx context.Context, key string, pageRows int, fn func(uuid.UUID)) error {
	st := driver.Statement{CQL: taskIDsStmt, Args: []any{key}, PageSize: pageRows}
	return eachPage(ctx, s.session, st, func(iter driver.Iter) {
		for id := (uuid.UUID{}); iter.Scan(&id); {
			fn(id)
		}
	})
}

// pageTries is how many times eachPage sends one page that timed out.
const pageTries = 3

// eachPage runs the paged read st one page at a time, handing each to scan, and
// sends a page that timed out again from where it began, up to pageTries times: a read
// of a partition drained of many tasks walks their tombstones, and one page may take
// longer than the driver waits (as a bench's count of what a burst left did on one
// node, which has no other replica to send it to). A page is one request, whose rows
// arrive whole or not at all, so scan never sees a row twice.
func eachPage(ctx context.Context, session driver.Session, st driver.Statement, scan func(driver.Iter)) error {
	var state []byte
	for {
		for try := 1; ; try++ {
			st.OnePage, st.PageState = true, state
			iter := session.Iter(ctx, st)
			scan(iter)
			next := iter.PageState()
			err := iter.Close()
			if err == nil {
				state = next
				break
			}
			if try == pageTries || !driver.TimedOut(err) || ctx.Err() != nil {
				return err
			}
		}
		if len(state) == 0 {
			return nil
		}
	}
}
