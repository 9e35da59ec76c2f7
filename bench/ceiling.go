package main

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
)

// ceilingTimeout is the driver timeout of the ceiling workload's session.
const ceilingTimeout = 10 * time.Second

// ceiling measures the Cassandra work the queue does without the queue's logic, in the
// same run on the same machine, through the library's store: inserts of the same rows one
// statement each at the producer's concurrency, lock take/release cycles on distinct
// partitions, and the lock + read + markers + swap + ack a drain makes, without peeks,
// index entries or signals.
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
	st := store.Of(gocqlv1.New(s))
	rows := make([]taskrow.Row, n)
	for i := range rows {
		id := shard.NewID(now)
		rows[i] = taskrow.Row{Key: l.Key(l.Bucket(now), l.ShardFor(id)), Priority: int8(i % 10), ID: id, TaskID: id,
			Payload: payload, DueAt: now, Timeout: q.DefaultTimeout}
	}

	// 1. Inserts, one statement each, producer.DefaultWritesInFlight at a time.
	var next atomic.Int64
	t0 := time.Now()
	err = fanout.Each(producer.DefaultWritesInFlight, producer.DefaultWritesInFlight, func(int) error {
		for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
			if err := st.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: rows[i], Stamp: stamp()}}); err != nil {
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
	lwtRate, err := lwtCycles(ctx, st, b.o.consumers, 5*time.Second)
	if err != nil {
		return err
	}

	// 3. The drain's own Cassandra work: consumers goroutines, each on its own partition
	// holding n/consumers due rows, take its lock, read a batch, write the leases' markers,
	// swap the rows out in one conditional batch that frees the lock, and ack the markers
	// in another.
	req0 := b.requests.Load()
	drainRate, err := drainCeiling(ctx, st, now, n, b.o.consumers, b.o.batch, q.DefaultTimeout)
	if err != nil {
		return err
	}
	drainRequests := float64(b.requests.Load()-req0) / float64(n)
	// Its figures are the v1 session's above, whatever -driver is.
	b.emit(result{"workload": "ceiling", "driver": driverGocql, "tasks": n, "consumers": b.o.consumers, "batch": b.o.batch,
		"ceiling_insert_rows_per_s": insertRate, "ceiling_lwt_cycles_per_s": lwtRate, "ceiling_drain_tasks_per_s": drainRate,
		"ceiling_drain_requests_per_task": drainRequests})
	return nil
}

func lwtCycles(ctx context.Context, st store.Store, workers int, d time.Duration) (float64, error) {
	var cycles atomic.Int64
	deadline := time.Now().Add(d)
	err := fanout.Each(workers, workers, func(i int) error {
		key := fmt.Sprintf("ceiling-lwt:%d:0", i)
		for token := int64(1); time.Now().Before(deadline); token++ {
			if err := take(ctx, st, key, token); err != nil {
				return err
			}
			if applied, _, err := st.Locks().Release(ctx, store.LockRef{Key: key, Holder: holder, Token: token}); err != nil || !applied {
				return cmp.Or(err, fmt.Errorf("lock release on %s not applied", key))
			}
			cycles.Add(1)
		}
		return nil
	})
	return float64(cycles.Load()) / d.Seconds(), err
}

// holder holds the ceiling's locks.
var holder = shard.NewID(time.Now())

// take takes key's lock with token, the one after the last taken.
func take(ctx context.Context, st store.Store, key string, token int64) error {
	var expected *int64
	if token > 1 {
		expected = new(token - 1)
	}
	applied, _, err := st.Locks().Take(ctx, key, holder, token, expected, 5*time.Second)
	if err != nil || !applied {
		return cmp.Or(err, fmt.Errorf("lock take on %s not applied", key))
	}
	return nil
}

func drainCeiling(ctx context.Context, st store.Store, now time.Time, n, workers, batch int, timeout time.Duration) (float64, error) {
	per := n / workers
	err := fanout.Each(workers, workers, func(w int) error {
		key := fmt.Sprintf("ceiling-drain:%d:0", w)
		for chunk := 0; chunk < per; chunk += 100 {
			var muts []store.Mutation
			for i := chunk; i < min(chunk+100, per); i++ {
				id := shard.NewID(now)
				r := taskrow.Row{Key: key, Priority: int8(i % 10), ID: id, TaskID: id, Payload: payload, DueAt: now, Timeout: timeout}
				muts = append(muts, store.Mutation{Op: store.Insert, Row: r, Stamp: stamp()})
			}
			if err := st.Tasks().Write(ctx, muts); err != nil {
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
		for token := int64(1); ; token++ {
			if err := take(ctx, st, key, token); err != nil {
				return err
			}
			rows, _, err := st.Leasing().Rows(ctx, key, allPriorities, shard.MinID(now.Add(-time.Minute)), shard.MaxID(time.Now()),
				batch, batch, consumer.MaxTakeBytes)
			if err != nil || len(rows) == 0 {
				return err
			}
			markers := make([]taskrow.Row, len(rows))
			for i, r := range rows {
				markers[i] = r
				markers[i].Key = fmt.Sprintf("ceiling-drain:%d:1", w)
				markers[i].ID = shard.NewID(time.Now().Add(timeout))
				markers[i].Attempt++
			}
			if err := st.Leasing().WriteMarkers(ctx, markers, stamp(), 1); err != nil {
				return err
			}
			lk := store.LockRef{Key: key, Holder: holder, Token: token}
			if applied, err := st.Leasing().Swap(ctx, lk, 0, nil, rows); err != nil || !applied {
				return cmp.Or(err, fmt.Errorf("ceiling swap on %s not applied", key))
			}
			if applied, err := st.Leasing().DeleteMarkers(ctx, markers); err != nil || !applied {
				return cmp.Or(err, fmt.Errorf("ceiling ack on %s not applied", key))
			}
		}
	})
	return float64(per*workers) / time.Since(t0).Seconds(), err
}

// stamp is a write timestamp a second behind this host's clock, as the library stamps
// writes behind the cluster's time (the bench's node runs on this host).
func stamp() int64 { return time.Now().Add(-time.Second).UnixMicro() }
