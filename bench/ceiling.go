package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
)

// ceilingTimeout is the driver timeout of the ceiling workload's session.
const ceilingTimeout = 10 * time.Second

// ceiling measures the Cassandra work the queue does without the queue's logic, in the
// same run on the same machine: plain prepared inserts of the same rows at the producer's
// concurrency, LWT acquire/release cycles on distinct partitions, and the read + swap
// batch + ack batch a drain makes, without peeks or locks.
func (b *bench) ceiling(ctx context.Context) error {
	_, q, err := b.fresh(ctx, b.queueConfig("ceiling"))
	if err != nil {
		return err
	}
	// It saturates the nodes on purpose and has no retries or settling of its own, so it
	// waits for answers as long as the driver's default rather than RecommendedTimeout:
	// at three nodes on two cores, 1 s timeouts ended it before it measured anything.
	c := cqlcluster.New(b.hosts...)
	c.Keyspace = b.o.keyspace
	c.NumConns = 4
	c.Timeout = ceilingTimeout
	c.QueryObserver = b.counter()
	c.BatchObserver = b.counter()
	s, err := c.CreateSession()
	if err != nil {
		return err
	}
	defer s.Close()
	n := b.o.ceilingTasks
	l := q.Layout()
	now := time.Now()
	rows := make([]taskrow.Row, n)
	for i := range rows {
		id := gocql.UUID(shard.NewID(now))
		rows[i] = taskrow.Row{Key: l.Key(l.Bucket(now), l.ShardFor(uuid.UUID(id))), Priority: int8(i % 10), ID: id, TaskID: id,
			Payload: payload, DueAt: now, Timeout: q.DefaultTimeout}
	}

	// 1. Inserts, one statement each, producer.DefaultWritesInFlight at a time.
	var next atomic.Int64
	t0 := time.Now()
	err = fanout.Each(producer.DefaultWritesInFlight, producer.DefaultWritesInFlight, func(int) error {
		for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
			stmt, args := rows[i].Insert(stamp())
			if err := s.Query(stmt, args...).WithContext(ctx).Exec(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	insertRate := float64(n) / time.Since(t0).Seconds()

	// 2. LWT acquire + release on a partition of each goroutine's own, for five seconds.
	lwtRate, err := lwtCycles(ctx, s, b.o.consumers, 5*time.Second)
	if err != nil {
		return err
	}

	// 3. The drain's own Cassandra work: consumers goroutines, each on its own partition
	// holding n/consumers due rows, read a batch, swap it for leases in one conditional
	// batch, and ack the leases in another.
	req0 := b.requests.Load()
	drainRate, err := drainCeiling(ctx, s, now, n, b.o.consumers, b.o.batch, q.DefaultTimeout)
	if err != nil {
		return err
	}
	drainRequests := float64(b.requests.Load()-req0) / float64(n)
	b.emit(result{"workload": "ceiling", "tasks": n, "consumers": b.o.consumers, "batch": b.o.batch,
		"ceiling_insert_rows_per_s": insertRate, "ceiling_lwt_cycles_per_s": lwtRate, "ceiling_drain_tasks_per_s": drainRate,
		"ceiling_drain_requests_per_task": drainRequests})
	return nil
}

func lwtCycles(ctx context.Context, s *gocql.Session, workers int, d time.Duration) (float64, error) {
	const where = ` WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	lockID := taskrow.LockID
	var cycles atomic.Int64
	deadline := time.Now().Add(d)
	err := fanout.Each(workers, workers, func(i int) error {
		key := fmt.Sprintf("ceiling-lwt:%d:0", i)
		for time.Now().Before(deadline) {
			me := gocql.TimeUUID()
			for _, q := range []*gocql.Query{
				s.Query(`UPDATE tasks USING TTL 5 SET lock_holder = ?`+where+` IF lock_holder = null`, me, key, lockID),
				s.Query(`UPDATE tasks SET lock_holder = null`+where+` IF lock_holder = ?`, key, lockID, me),
			} {
				applied, err := q.WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(map[string]any{})
				if err != nil {
					return err
				}
				if !applied {
					return fmt.Errorf("LWT on %s not applied", key)
				}
			}
			cycles.Add(1)
		}
		return nil
	})
	return float64(cycles.Load()) / d.Seconds(), err
}

func drainCeiling(ctx context.Context, s *gocql.Session, now time.Time, n, workers, batch int, timeout time.Duration) (float64, error) {
	lockID := taskrow.LockID
	per := n / workers
	err := fanout.Each(workers, workers, func(w int) error {
		key := fmt.Sprintf("ceiling-drain:%d:0", w)
		for chunk := 0; chunk < per; chunk += 100 {
			b := s.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
			for i := chunk; i < min(chunk+100, per); i++ {
				id := gocql.UUID(shard.NewID(now))
				r := taskrow.Row{Key: key, Priority: int8(i % 10), ID: id, TaskID: id, Payload: payload, DueAt: now, Timeout: timeout}
				stmt, args := r.Insert(stamp())
				b.Query(stmt, args...)
			}
			if err := s.ExecuteBatch(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	err = fanout.Each(workers, workers, func(w int) error {
		key := fmt.Sprintf("ceiling-drain:%d:0", w)
		for {
			rows, _, err := taskrow.Scan(s.Query(taskrow.SelectRange, key, allPriorities, gocql.UUID(shard.MinID(now.Add(-time.Minute))),
				gocql.UUID(shard.MaxID(time.Now())), batch).WithContext(ctx).Iter(), key, consumer.MaxTakeBytes)
			if err != nil || len(rows) == 0 {
				return err
			}
			// The queue's shape: markers written plainly into another partition, then one
			// conditional batch that deletes the rows read, then a conditional ack batch.
			markers := s.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
			swap := s.NewBatch(gocql.LoggedBatch).WithContext(ctx)
			swap.RetryPolicy(lwt.NoRetry)
			swap.Query(`UPDATE tasks SET lock_token = 0 WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ? IF lock_holder = null`, key, lockID)
			ack := s.NewBatch(gocql.LoggedBatch).WithContext(ctx)
			ack.RetryPolicy(lwt.NoRetry)
			for _, r := range rows {
				swap.Query(taskrow.Delete, r.KeyArgs()...)
				lease := r
				lease.Key = fmt.Sprintf("ceiling-drain:%d:1", w)
				lease.ID = gocql.UUID(shard.NewID(time.Now().Add(timeout)))
				lease.Attempt++
				stmt, args := lease.Insert(stamp())
				markers.Query(stmt, args...)
				ack.Query(taskrow.DeleteIfExists, lease.KeyArgs()...)
			}
			if err := s.ExecuteBatch(markers); err != nil {
				return err
			}
			for _, bt := range []*gocql.Batch{swap, ack} {
				applied, iter, err := s.ExecuteBatchCAS(bt)
				if err == nil {
					err = iter.Close()
				}
				if err != nil {
					return err
				}
				if !applied {
					return fmt.Errorf("ceiling batch on %s not applied", key)
				}
			}
		}
	})
	return float64(per*workers) / time.Since(t0).Seconds(), err
}

// stamp is a write timestamp a second behind this host's clock, as the library stamps
// writes behind the cluster's time (the bench's node runs on this host).
func stamp() int64 { return time.Now().Add(-time.Second).UnixMicro() }
