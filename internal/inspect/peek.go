package inspect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/shard"
)

// MaxPeek is the most tasks one Peek returns.
const MaxPeek = 1000

// Task is a due task row as Peek found it.
type Task struct {
	// ID is the task's own ID, kept across deliveries.
	ID       uuid.UUID
	ShardKey string
	Priority int
	// Visible is when the row became visible: its place among due tasks of its priority.
	Visible time.Time
	// DueAt is the due time the task was scheduled with.
	DueAt   time.Time
	Attempt int
	Timeout time.Duration
	Payload []byte

	row gocql.UUID // the row's clustering ID
}

// Peeked is what Peek found.
type Peeked struct {
	// Tasks are the due tasks, in delivery order.
	Tasks []Task
	// Failed lists the partitions that could not be read; Tasks may lack theirs.
	Failed []*PartitionError
}

const (
	peekStmt = `SELECT priority, id, task_id, due_at, timeout_ms, attempt FROM tasks
		WHERE shard_key = ? AND kind = 1 AND priority IN ? AND id > ? AND id <= ? LIMIT ?`
	payloadStmt = `SELECT payload FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`
)

// Peek returns up to n tasks due now in the order consumers deliver them: highest
// priority first, then the earliest visible (consumers keep that order within a
// concurrency shard; across shards it is best effort). It leases nothing and takes no
// lock. Each partition of the lap gives at most n rows' keys, merged as they come, so
// memory holds n rows plus one partition's; then only the n chosen payloads are read. A
// task taken by a consumer in between is left out.
func (in *Inspector) Peek(ctx context.Context, n int) (*Peeked, error) {
	if n < 1 || n > MaxPeek {
		return nil, shardq.Invalid("n", "%d is not in [1, %d]", n, MaxPeek)
	}
	now := in.cfg.Clock.Now()
	parts := in.lap(now)
	upper := gocql.UUID(shard.MaxID(now))
	out := &Peeked{}
	var mu sync.Mutex
	_ = fanout.Each(len(parts), in.cfg.PartitionsInFlight, func(i int) error {
		got, err := in.peekPartition(ctx, parts[i], upper, n)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out.Failed = append(out.Failed, &PartitionError{ShardKey: parts[i].key, Err: err})
			return nil
		}
		out.Tasks = append(out.Tasks, got...)
		sortTasks(out.Tasks)
		out.Tasks = out.Tasks[:min(n, len(out.Tasks))]
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gone := make([]bool, len(out.Tasks))
	_ = fanout.Each(len(out.Tasks), in.cfg.PartitionsInFlight, func(i int) error {
		t := &out.Tasks[i]
		err := cql.Query(in.session, payloadStmt, t.ShardKey, int8(t.Priority), t.row).WithContext(ctx).Scan(&t.Payload)
		switch {
		case errors.Is(err, gocql.ErrNotFound):
			gone[i] = true
		case err != nil:
			gone[i] = true
			mu.Lock()
			out.Failed = append(out.Failed, &PartitionError{ShardKey: t.ShardKey, Err: fmt.Errorf("reading the payload of %s: %w", t.ID, err)})
			mu.Unlock()
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	kept := out.Tasks[:0]
	for i, t := range out.Tasks {
		if !gone[i] {
			kept = append(kept, t)
		}
	}
	out.Tasks = kept
	return out, nil
}

// peekPartition reads up to n due rows of each priority group of pt, from where
// consumers read it, without payloads.
func (in *Inspector) peekPartition(ctx context.Context, pt partition, upper gocql.UUID, n int) ([]Task, error) {
	s, err := in.readStarts(ctx, pt)
	if err != nil {
		return nil, err
	}
	var out []Task
	for _, g := range plan(&s) {
		iter := cql.Query(in.session, peekStmt, pt.key, g.prios, g.from, upper, n).WithContext(ctx).Iter()
		var prio int8
		var id, taskID gocql.UUID
		var dueAt time.Time
		var timeoutMs int64
		var attempt int
		for iter.Scan(&prio, &id, &taskID, &dueAt, &timeoutMs, &attempt) {
			out = append(out, Task{ID: uuid.UUID(taskID), ShardKey: pt.key, Priority: int(prio),
				Visible: shard.IDTime(uuid.UUID(id)), DueAt: dueAt, Attempt: attempt,
				Timeout: time.Duration(timeoutMs) * time.Millisecond, row: id})
		}
		if err := iter.Close(); err != nil {
			return nil, fmt.Errorf("reading the due rows of %s: %w", pt.key, err)
		}
	}
	return out, nil
}
