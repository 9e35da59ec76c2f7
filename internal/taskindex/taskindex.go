// Package taskindex keeps the task_index table: where each task's row is and what state
// the task is in, for Get, Cancel and Reschedule.
//
// Every move of a task writes its entry before the move (so a crash in between leaves the
// entry pointing at both the old and the new row, and readers check which exists) or after
// it, for the final step (ack, dead letter, cancel), whose loss leaves an entry pointing at
// rows that are gone, which readers take for "not found". Write timestamps come from the
// task, not from clocks: Stamp grows with the task's delivery token and with each step of
// one delivery, so the later step wins even when the processes that wrote them disagree
// about the time.
package taskindex

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/shard"
)

// State is a task's state as recorded. The values are stored: never renumber them.
type State int8

const (
	Scheduled State = 1
	InFlight  State = 2
	Retrying  State = 3
	Dead      State = 4
	Completed State = 5
	Cancelled State = 6
)

// Finished is how long the entry of a task that completed or was cancelled is kept at
// least: long enough for a producer claiming the task's key to tell a finished task from
// one whose producer is still writing it (producer.KeyClaimGrace).
const Finished = 10 * time.Minute

// Slots is how many partitions share one minute of task IDs.
const Slots = 32

// stepBits leaves room for 2^20-1 steps (extensions, retries, reschedules) per delivery.
const stepBits = 20

// Final is the step of the write that ends a delivery: ack, dead letter or cancel.
const Final = 1<<stepBits - 1

// leaseSteps is how many steps a lease's declaration may take. Two takes of one row
// declare the same delivery, and when the first one's swap did not apply, the second,
// which holds the partition's lock with a greater token, must outrank it: at one stamp
// Cassandra keeps the greater value of each cell, and the entry would name the rows of
// both, one of them dropped. The moves a holder makes after its swap come above them.
const leaseSteps = 1 << (stepBits - 1)

// LeaseStep is the step of a lease's declaration made under the lock with token
// lockToken (a partition's tokens grow by one per holder; they wrap after 2^19 holders).
func LeaseStep(lockToken int64) int64 { return lockToken % leaseSteps }

// MoveStep is the step of the nth move (Extend, Retry) a holder makes after its swap.
func MoveStep(n int64) int64 { return leaseSteps + n }

// Keep is how long an entry outlives the time its row becomes visible, so an entry of a
// task that waits in a backlog, or one whose final write was lost, still goes away.
const Keep = 30 * 24 * time.Hour

// maxTTL is Cassandra's largest TTL (20 years).
const maxTTL = 20 * 365 * 24 * time.Hour

// Loc is where a row of the tasks table is; a zero Key means nowhere.
type Loc struct {
	Key      string
	Priority int8
	ID       gocql.UUID
}

// Entry is one task's index row.
type Entry struct {
	TaskID    uuid.UUID
	Queue     string
	Key       string // the task's unique key, if any
	State     State
	Row       Loc // where the task's row is now, for the pending and in-flight states
	PrevState State
	Prev      Loc // where it was before the last move, until the move is known done
	// The rest is recorded only by final entries: a task still pending or in flight is
	// described by its row, which readers read anyway.
	DueAt   time.Time
	Attempt int
	Token   int64
	Error   string
	DoneAt  time.Time
}

// Final reports whether s ends a task's life (until a replay).
func (s State) Final() bool { return s == Dead || s == Completed || s == Cancelled }

// Stamp is the write timestamp of step of the delivery numbered token (0 before the first).
func Stamp(taskID uuid.UUID, token int64, step int64) int64 {
	return shard.IDTime(taskID).UnixMicro() + token<<stepBits + step
}

// Delivery is the delivery token of the entry of taskID written at stamp: what Stamp
// was given, for entries (of tasks still moving) that do not record it.
func Delivery(taskID uuid.UUID, stamp int64) int64 {
	return (stamp - shard.IDTime(taskID).UnixMicro()) >> stepBits
}

// TTL is how long an entry whose row becomes visible at visible is kept, from now.
func TTL(now, visible time.Time) time.Duration {
	return min(max(visible.Sub(now), 0)+Keep, maxTTL)
}

func partition(id uuid.UUID) (int32, int8) {
	minute := shard.IDTime(id).Unix() / 60
	return int32(minute), int8(binary.BigEndian.Uint64(id[8:]) % Slots)
}

const remove = `DELETE FROM task_index USING TIMESTAMP ? WHERE minute = ? AND slot = ? AND task_id = ?`

// Write is one entry to write with its timestamp (Stamp) and TTL; with Replace, in place
// of all the entry held; with Delete, the removal of the entry of Entry.TaskID.
type Write struct {
	Entry   Entry
	Stamp   int64
	TTL     time.Duration
	Replace bool
	Delete  bool
}

// stmts returns the statements of w. Columns whose value is zero are left out rather
// than written as nulls (tombstones): what an earlier step wrote there is either still
// true (the key) or never read in the new state. A final entry (Replace) first deletes
// the entry, so that the cells of earlier steps, which live as long as their own TTLs,
// go with it.
func (w Write) stmts() (stmts []string, args [][]any) {
	minute, slot := partition(w.Entry.TaskID)
	id := gocql.UUID(w.Entry.TaskID)
	switch {
	case w.Delete:
		return []string{remove}, [][]any{{w.Stamp, minute, slot, id}}
	case w.Replace:
		stmts, args = append(stmts, remove), append(args, []any{w.Stamp - 1, minute, slot, id})
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

// Apply writes ws, in unlogged batches of up to batchPartitions index partitions each,
// inflight batches at once. The entries of one consumer's fetch or ack lie in as many
// partitions as tasks (a partition per minute and slot of task IDs); a request each would
// cost more than the writes. On error, failed lists the indexes of ws that may not be
// written.
func Apply(ctx context.Context, session *gocql.Session, ws []Write, inflight int) (failed []int, err error) {
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
		m, s := partition(w.Entry.TaskID)
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
			s, a := ws[j].stmts()
			stmts, args = append(stmts, s...), append(args, a...)
		}
		var err error
		if len(stmts) == 1 {
			err = cql.Query(session, stmts[0], args[0]...).WithContext(ctx).Exec()
		} else {
			b := cql.Batch(session, gocql.UnloggedBatch).WithContext(ctx)
			for k, stmt := range stmts {
				b.Query(stmt, args[k]...)
			}
			err = session.ExecuteBatch(b)
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

// ErrNotFound means the index holds no entry for the task.
var ErrNotFound = errors.New("taskindex: no entry")

// Read returns the entry of task id and the timestamp of its last write.
func Read(ctx context.Context, session *gocql.Session, id uuid.UUID) (Entry, int64, error) {
	minute, slot := partition(id)
	var (
		e                               Entry
		state, prevState, rowPr, prevPr int8
		queue, key, rowKey, prevKey     *string
		errText                         *string
		rowID, prevID                   *gocql.UUID
		dueAt, doneAt                   *time.Time
		stamp                           int64
	)
	err := cql.Query(session, `SELECT queue, key, state, row_key, row_priority, row_id, prev_state, prev_key,
		prev_priority, prev_id, due_at, attempt, deliveries, error, done_at, WRITETIME(state)
		FROM task_index WHERE minute = ? AND slot = ? AND task_id = ?`, minute, slot, gocql.UUID(id)).
		WithContext(ctx).Scan(&queue, &key, &state, &rowKey, &rowPr, &rowID, &prevState, &prevKey, &prevPr, &prevID,
		&dueAt, &e.Attempt, &e.Token, &errText, &doneAt, &stamp)
	if errors.Is(err, gocql.ErrNotFound) {
		return Entry{}, 0, ErrNotFound
	}
	if err != nil {
		return Entry{}, 0, fmt.Errorf("reading the task index: %w", err)
	}
	e.TaskID = id
	e.Key = deref(key)
	e.State, e.PrevState = State(state), State(prevState)
	if rowKey != nil && rowID != nil {
		e.Row = Loc{Key: *rowKey, Priority: rowPr, ID: *rowID}
	}
	if prevKey != nil && prevID != nil {
		e.Prev = Loc{Key: *prevKey, Priority: prevPr, ID: *prevID}
	}
	e.DueAt, e.DoneAt = deref(dueAt), deref(doneAt)
	e.Error = deref(errText)
	// Entries of tasks still moving leave the queue out: their rows' keys name it.
	e.Queue = deref(queue)
	for _, at := range []Loc{e.Row, e.Prev} {
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
