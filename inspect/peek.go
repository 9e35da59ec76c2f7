package inspect

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// MaxPeek is the most tasks one Peek returns.
const MaxPeek = 1000

// Peeked is what Peek found.
type Peeked struct {
	// Tasks are the due tasks, in delivery order: TaskScheduled when never delivered,
	// TaskRetrying when due again (a retry's delay or a lease ran out).
	Tasks []shardqtype.TaskInfo
	// Failed lists the partitions that could not be read; Tasks may lack theirs.
	Failed []*PartitionError
}

// dueRow is a due task row as Peek found it: the task and the row's clustering ID,
// which orders rows of one priority and names the row whose payload is read.
type dueRow struct {
	task shardqtype.TaskInfo
	id   uuid.UUID
}

// sortDue orders rows as consumers deliver them: highest priority first, then the
// earliest visible.
func sortDue(rs []dueRow) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.task.Priority != b.task.Priority {
			return a.task.Priority > b.task.Priority
		}
		return shard.CompareIDs(a.id, b.id) < 0
	})
}

// Peek returns up to n tasks of queue due now in the order consumers deliver them:
// highest priority first, then the earliest visible (consumers keep that order within a
// concurrency shard; across shards it is best effort). It leases nothing and takes no
// lock. Each partition of the lap gives at most n rows' keys, merged as they come, so
// memory holds n rows plus one partition's; then only the n chosen payloads are read. A
// task taken by a consumer in between is left out. Peeked tasks carry no Key: the
// task row does not hold it (Task reads it).
func (in *Inspector) Peek(ctx context.Context, queue string, n int) (*Peeked, error) {
	if n < 1 || n > MaxPeek {
		return nil, defaults.Invalid("n", "%d is not in [1, %d]", n, MaxPeek)
	}
	q, err := in.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	now := in.cfg.Clock.Now()
	parts := q.lap(now)
	upper := shard.MaxID(now)
	out := &Peeked{}
	var rows []dueRow
	var mu sync.Mutex
	_ = fanout.Each(len(parts), in.cfg.PartitionsInFlight, func(i int) error {
		got, err := in.peekPartition(ctx, q, parts[i], upper, n)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out.Failed = append(out.Failed, &PartitionError{PartitionKey: parts[i].key, Err: err})
			return nil
		}
		rows = append(rows, got...)
		sortDue(rows)
		rows = rows[:min(n, len(rows))]
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gone := make([]bool, len(rows))
	_ = fanout.Each(len(rows), in.cfg.PartitionsInFlight, func(i int) error {
		r := &rows[i]
		row, ok, err := in.state.Store.Tasks().Read(ctx, r.task.PartitionKey, int8(r.task.Priority), r.id)
		switch {
		case err != nil:
			gone[i] = true
			mu.Lock()
			out.Failed = append(out.Failed, &PartitionError{PartitionKey: r.task.PartitionKey,
				Err: fmt.Errorf("reading the payload of %s: %w", r.task.ID, err)})
			mu.Unlock()
		case !ok:
			gone[i] = true
		default:
			r.task.Payload, r.task.Headers, r.task.Kind = row.Payload, row.Headers, row.Kind
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, r := range rows {
		if !gone[i] {
			out.Tasks = append(out.Tasks, r.task)
		}
	}
	return out, nil
}

// peekPartition reads up to n due rows of each priority group of pt, from where
// consumers read it, without payloads.
func (in *Inspector) peekPartition(ctx context.Context, q queueRead, pt partition, upper uuid.UUID, n int) ([]dueRow, error) {
	s, err := in.readStarts(ctx, pt)
	if err != nil {
		return nil, err
	}
	var out []dueRow
	for _, g := range plan(&s) {
		heads, err := in.state.Store.Scans().Heads(ctx, pt.key, g.Prios, g.Floor, upper, n)
		if err != nil {
			return nil, fmt.Errorf("reading the due rows of %s: %w", pt.key, err)
		}
		for _, r := range heads {
			id := r.ID
			t := shardqtype.TaskInfo{ID: r.TaskID, Queue: q.cfg.Name, State: shardqtype.TaskScheduled, DueAt: r.DueAt,
				Priority: int(r.Priority), Attempt: r.Attempt, Token: r.Token, Timeout: r.Timeout,
				VisibleAt: shard.IDTime(id), PartitionKey: pt.key}
			if r.Attempt > 0 {
				// Due again, as Task reports it: at the time its row became visible.
				t.State, t.DueAt = shardqtype.TaskRetrying, t.VisibleAt
			}
			out = append(out, dueRow{task: t, id: id})
		}
	}
	return out, nil
}
