// Package taskscan lists every task row a queue still holds, whatever its time: what the
// bench drains, the demo and shardqtest wait on to know a queue is empty. It reads the
// tasks table and writes nothing.
package taskscan

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/shardqtype"
)

// PageSize is the page size of TaskIDs outside tests: a few hundred kilobytes of IDs.
const PageSize = 5000

// TaskIDs returns the task ID of every task row (kind 1: a pending task, or the
// timeout marker of a task in flight or retrying) in any partition of q, whatever its
// time: what the queue could still deliver. A task twice in the table is listed twice.
// It reads inFlight partitions at once, each from its start in pages of pageSize rows,
// walking the tombstones of every task consumed since they were last purged (and fails
// on a partition drained of more than tombstone_failure_threshold in that time); a
// partition that cannot be read fails the call, since what it holds is unknown.
//
// A queue whose layout changed is read in every layout it had, drained or not.
func TaskIDs(ctx context.Context, d *shardqtype.Driver, q shardqtype.QueueConfig, inFlight, pageSize int) ([]uuid.UUID, error) {
	tables := sessionstate.For(d, nil).Store
	st, err := tables.Queues().Status(ctx, q.Name, false)
	if err != nil {
		return nil, fmt.Errorf("taskscan: reading the layouts of queue %q: %w", q.Name, err)
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return nil, err
	}
	var keys []string // one lap of buckets holds every partition key once
	for _, g := range h.Gens {
		lay := g.Layout
		for s := range lay.ShardCount {
			for b := range int64(lay.BucketCount) {
				keys = append(keys, lay.Key(b, s))
			}
		}
	}
	scans := tables.Scans()
	var mu sync.Mutex
	var ids []uuid.UUID
	err = fanout.Each(len(keys), inFlight, func(i int) error {
		var found []uuid.UUID
		err := scans.TaskIDs(ctx, keys[i], pageSize, func(id uuid.UUID) { found = append(found, id) })
		if err != nil {
			return fmt.Errorf("taskscan: reading the task IDs of %s: %w", keys[i], err)
		}
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, found...)
		return nil
	})
	return ids, err
}
