package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// soak pushes N tasks through one queue at a steady rate while C consumers drain it, and
// compares acquire latency and tombstones scanned per read early in the run with late.
func (b *bench) soak(ctx context.Context) error {
	s, q, err := b.fresh(ctx, b.queueConfig("soak"))
	if err != nil {
		return err
	}
	n, rate := b.o.soakTasks, b.o.soakRate
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return err
	}
	tr := newTracker(n)
	cl := &calls{}
	var ids []uuid.UUID
	var idsMu sync.Mutex
	prodErr := make(chan error, 1)
	start := time.Now()
	go func() { // the steady producer: rate/10 tasks every 100 ms
		defer close(prodErr)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for sent := 0; sent < n; {
			<-tick.C
			chunk := make([]producer.Task, min(max(rate/10, 1), n-sent))
			for i := range chunk {
				chunk[i] = producer.Task{Queue: q.Name, Payload: payload, Priority: i % 10}
			}
			got, err := p.ScheduleTasks(ctx, chunk)
			if err != nil {
				prodErr <- err
				return
			}
			idsMu.Lock()
			ids = append(ids, got...)
			idsMu.Unlock()
			sent += len(chunk)
		}
	}()
	stop := make(chan struct{})
	go progress("soak", n, func() int { return int(tr.delivered.Load()) }, stop)

	// Tombstones per read, early (at a tenth of the run) and late (at nine tenths).
	expected := time.Duration(float64(n)/float64(rate)) * time.Second
	type sample struct {
		at         time.Time
		tombstones float64
		err        error
	}
	samples := make(chan sample, 2)
	go func() {
		for _, frac := range []float64{0.1, 0.9} {
			time.Sleep(time.Until(start.Add(time.Duration(frac * float64(expected)))))
			t, err := b.tombstonesPerRead(ctx, q)
			samples <- sample{time.Now(), t, err}
		}
	}()

	d, err := b.drain(ctx, s, q, b.o.consumers, b.o.batch, n, tr, cl, expected+10*time.Minute)
	close(stop)
	if err != nil {
		return err
	}
	if err := <-prodErr; err != nil {
		return err
	}
	end := d.at // not the settling after it, which acquires nothing
	early, late := <-samples, <-samples
	if early.err != nil || late.err != nil {
		return fmt.Errorf("tracing reads: %v %v", early.err, late.err)
	}
	tenth := end.Sub(start) / 10
	s50, s99, _ := percentiles(cl.window(start, start.Add(tenth)))
	e50, e99, _ := percentiles(cl.window(end.Add(-tenth), end))
	lost, dups := tr.lostAndDuplicates(ids, d.left)
	b.emit(result{"workload": "soak", "tasks": n, "rate_per_s": rate, "consumers": b.o.consumers, "batch": b.o.batch,
		"drain_tasks_per_s":    float64(n) / tr.lastAck.Sub(start).Seconds(),
		"acquire_p50_ms_start": s50, "acquire_p99_ms_start": s99, "acquire_p50_ms": e50, "acquire_p99_ms": e99,
		"tombstones_per_read_start": early.tombstones, "tombstones_per_read": late.tombstones,
		"lost": lost, "duplicates": dups, "left": len(d.left), "settle_s": d.took.Seconds()})
	return nil
}

var tombstoneCells = regexp.MustCompile(`(\d+) tombstone cells`)

// tombstonesPerRead traces the read consumers make of the current bucket of every shard
// and averages the tombstones the server reports scanning. The reads go through a session
// of their own, which traces every request it sends.
func (b *bench) tombstonesPerRead(ctx context.Context, q shardqtype.QueueConfig) (float64, error) {
	c := cqlcluster.New(b.hosts...)
	c.Keyspace = b.o.keyspace
	s, err := c.CreateSession()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	var trace bytes.Buffer
	s.SetTrace(gocql.NewTraceWriter(s, &trace))
	leasing := store.Of(gocqlv1.New(s)).Leasing()
	l := q.Layout()
	now := time.Now()
	total, reads := 0, 0
	for sh := range q.ShardCount {
		key := l.Key(l.Bucket(now), sh)
		floor, err := lowestFloor(ctx, leasing, key, l.BucketStart(l.Bucket(now)-int64(q.BucketCount)))
		if err != nil {
			return 0, err
		}
		trace.Reset()
		if _, _, err := leasing.Rows(ctx, key, allPriorities, floor, shard.MaxID(now), 100, 100, consumer.MaxTakeBytes); err != nil {
			return 0, err
		}
		for _, m := range tombstoneCells.FindAllStringSubmatch(trace.String(), -1) {
			v, _ := strconv.Atoi(m[1])
			total += v
		}
		reads++
	}
	return float64(total) / float64(reads), nil
}

// allPriorities lists every priority, highest first, for reads of whole partitions.
var allPriorities = []int8{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}

// lowestFloor returns the lowest read floor the last swap recorded in a partition's lock
// row: where a consumer's read of it starts. With none recorded, it is the start of the
// previous lap, as for a consumer.
func lowestFloor(ctx context.Context, leasing store.Leasing, key string, prevLap time.Time) (uuid.UUID, error) {
	floors, err := leasing.Floors(ctx, key)
	if err != nil || len(floors) == 0 {
		return shard.MinID(prevLap), err
	}
	var low *uuid.UUID
	for _, f := range floors {
		if low == nil || shard.CompareIDs(f, *low) < 0 {
			low = &f
		}
	}
	return *low, nil
}
