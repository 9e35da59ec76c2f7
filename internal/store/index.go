package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/shard"
)

type index struct{ session driver.Session }

const removeIndexStmt = `DELETE FROM task_index USING TIMESTAMP ? WHERE minute = ? AND slot = ? AND task_id = ?`

// indexStmts returns the statements of w. Columns whose value is zero are left out rather
// than written as nulls (tombstones): what an earlier step wrote there is either still
// true (the key) or never read in the new state. A final entry (Replace) first deletes
// the entry, so that the cells of earlier steps, which live as long as their own TTLs,
// go with it.
func indexStmts(w taskindex.Write) (stmts []string, args [][]any) {
	minute, slot := taskindex.Partition(w.Entry.TaskID)
	id := w.Entry.TaskID
	switch {
	case w.Delete:
		return []string{removeIndexStmt}, [][]any{{w.Stamp, minute, slot, id}}
	case w.Replace:
		stmts, args = append(stmts, removeIndexStmt), append(args, []any{w.Stamp - 1, minute, slot, id})
	}
	e := w.Entry
	cols := []string{"minute", "slot", "task_id", "state"}
	vals := []any{minute, slot, id, int8(e.State)}
	add := func(col string, v any) {
		cols, vals = append(cols, col), append(vals, v)
	}
	if e.Key != "" {
		add("key", e.Key)
	}
	if e.State.Final() {
		add("queue", e.Queue)
		add("attempt", e.Attempt)
		add("deliveries", e.Token)
		add("done_at", e.DoneAt)
		if !e.DueAt.IsZero() {
			add("due_at", e.DueAt)
		}
		if e.Error != "" {
			add("error", e.Error)
		}
	}
	if e.Row.Key != "" {
		add("row_key", e.Row.Key)
		add("row_priority", e.Row.Priority)
		add("row_id", e.Row.ID)
	}
	if e.Prev.Key != "" {
		add("prev_state", int8(e.PrevState))
		add("prev_key", e.Prev.Key)
		add("prev_priority", e.Prev.Priority)
		add("prev_id", e.Prev.ID)
	}
	marks := strings.Repeat("?, ", len(cols)-1) + "?"
	stmt := "INSERT INTO task_index (" + strings.Join(cols, ", ") + ") VALUES (" + marks + ") USING TIMESTAMP ? AND TTL ?"
	return append(stmts, stmt), append(args, append(vals, w.Stamp, max(int64(w.TTL/time.Second), 1)))
}

// batchPartitions is the most index partitions one request writes: Cassandra warns of
// unlogged batches across more (unlogged_batch_across_partitions_warn_threshold).
const batchPartitions = 10

// Write writes ws, in unlogged batches of up to batchPartitions index partitions each,
// inflight batches at once. The entries of one consumer's fetch or ack lie in as many
// partitions as tasks (a partition per minute and slot of task IDs); a request each would
// cost more than the writes. On error, failed lists the indexes of ws that may not be
// written.
func (x index) Write(ctx context.Context, ws []taskindex.Write, inflight int) (failed []int, err error) {
	if len(ws) == 0 {
		return nil, nil
	}
	type pk struct {
		minute int32
		slot   int8
	}
	groups := map[pk][]int{}
	var order []pk
	for i, w := range ws {
		m, s := taskindex.Partition(w.Entry.TaskID)
		k := pk{m, s}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	chunks := (len(order) + batchPartitions - 1) / batchPartitions
	members := func(c int) []int {
		var idx []int
		for _, k := range order[c*batchPartitions : min((c+1)*batchPartitions, len(order))] {
			idx = append(idx, groups[k]...)
		}
		return idx
	}
	bad := make([]bool, chunks)
	err = fanout.Each(chunks, max(inflight, 1), func(c int) error {
		var stmts []string
		var args [][]any
		for _, j := range members(c) {
			s, a := indexStmts(ws[j])
			stmts, args = append(stmts, s...), append(args, a...)
		}
		var err error
		if len(stmts) == 1 {
			err = x.session.Exec(ctx, driver.Statement{CQL: stmts[0], Args: args[0]})
		} else {
			b := &driver.Batch{}
			for k, stmt := range stmts {
				b.Add(stmt, args[k]...)
			}
			err = x.session.ExecBatch(ctx, b)
		}
		if err != nil {
			bad[c] = true
			return fmt.Errorf("writing the task index: %w", err)
		}
		return nil
	})
	for c, b := range bad {
		if b {
			failed = append(failed, members(c)...)
		}
	}
	return failed, err
}

// Read returns the entry of task id and the timestamp of its last write.
func (x index) Read(ctx context.Context, id uuid.UUID) (taskindex.Entry, int64, error) {
	minute, slot := taskindex.Partition(id)
	var (
		e                               taskindex.Entry
		state, prevState, rowPr, prevPr int8
		queue, key, rowKey, prevKey     *string
		errText                         *string
		rowID, prevID                   *uuid.UUID
		dueAt, doneAt                   *time.Time
		stamp                           int64
	)
	err := driver.Scan(ctx, x.session, driver.Statement{CQL: `SELECT queue, key, state, row_key, row_priority, row_id, prev_state, prev_key,
		prev_priority, prev_id, due_at, attempt, deliveries, error, done_at, WRITETIME(state)
		FROM task_index WHERE minute = ? AND slot = ? AND task_id = ?`, Args: []any{minute, slot, id}}, &queue, &key, &state, &rowKey, &rowPr, &rowID, &prevState, &prevKey, &prevPr, &prevID,
		&dueAt, &e.Attempt, &e.Token, &errText, &doneAt, &stamp)
	if errors.Is(err, driver.ErrNotFound) {
		return taskindex.Entry{}, 0, taskindex.ErrNotFound
	}
	if err != nil {
		return taskindex.Entry{}, 0, fmt.Errorf("reading the task index: %w", err)
	}
	e.TaskID = id
	e.Key = deref(key)
	e.State, e.PrevState = taskindex.State(state), taskindex.State(prevState)
	if rowKey != nil && rowID != nil {
		e.Row = taskindex.Loc{Key: *rowKey, Priority: rowPr, ID: *rowID}
	}
	if prevKey != nil && prevID != nil {
		e.Prev = taskindex.Loc{Key: *prevKey, Priority: prevPr, ID: *prevID}
	}
	e.DueAt, e.DoneAt = deref(dueAt), deref(doneAt)
	e.Error = deref(errText)
	// Entries of tasks still moving leave the queue out: their rows' keys name it.
	e.Queue = deref(queue)
	for _, at := range []taskindex.Loc{e.Row, e.Prev} {
		if e.Queue == "" && at.Key != "" {
			e.Queue, _, _, _ = shard.ParseKey(at.Key)
		}
	}
	return e, stamp, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
