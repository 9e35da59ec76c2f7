package inspect

import (
	"context"
	"fmt"
	"sync"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
)

const taskIDsStmt = `SELECT task_id FROM tasks WHERE shard_key = ? AND kind = 1`

// TaskIDs returns the task ID of every task row (kind 1: a pending task, or the
// timeout marker of a task in flight or retrying) in any partition of the queue, whatever
// its time: what the queue could still deliver. A task twice in the table is listed
// twice. It reads every partition from its start, walking the tombstones of every task
// consumed since they were last purged, as Stats with Full does (and fails on a
// partition drained of more than tombstone_failure_threshold in that time); a partition
// that cannot be read fails the call, since what it holds is unknown.
func (in *Inspector) TaskIDs(ctx context.Context) ([]uuid.UUID, error) {
	parts := in.lap(in.cfg.Clock.Now()) // one lap holds every partition key once
	var mu sync.Mutex
	var ids []uuid.UUID
	err := fanout.Each(len(parts), in.cfg.PartitionsInFlight, func(i int) error {
		iter := cql.Query(in.session, taskIDsStmt, parts[i].key).WithContext(ctx).PageSize(in.cfg.PageSize).Iter()
		var found []uuid.UUID
		for id := (gocql.UUID{}); iter.Scan(&id); {
			found = append(found, uuid.UUID(id))
		}
		if err := iter.Close(); err != nil {
			return &PartitionError{ShardKey: parts[i].key, Err: fmt.Errorf("reading its task IDs: %w", err)}
		}
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, found...)
		return nil
	})
	return ids, err
}
