package main

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/producer"
)

// burst schedules N tasks due at once with ScheduleTasks, then drains them with C
// consumers.
func (b *bench) burst(ctx context.Context) error {
	s, q, err := b.fresh(ctx, b.queueConfig("burst"))
	if err != nil {
		return err
	}
	n := b.o.burstTasks
	ids, schedTime, err := scheduleAll(ctx, s, q.Name, n, func(int) time.Time { return time.Time{} })
	if err != nil {
		return err
	}
	tr := newTracker(n)
	stop := make(chan struct{})
	go progress("burst drain", n, func() int { return int(tr.delivered.Load()) }, stop)
	start := time.Now() // every task is due by now
	req0 := b.requests.Load()
	d, err := b.drain(ctx, s, q, b.o.consumers, b.o.batch, n, tr, nil, 10*time.Minute)
	close(stop)
	if err != nil {
		return err
	}
	lost, dups := tr.lostAndDuplicates(ids, d.left)
	p50, p99, mx := percentiles(tr.lateness)
	b.emit(result{"workload": "burst", "tasks": n, "consumers": b.o.consumers, "batch": b.o.batch, "shards": q.ShardCount,
		"schedule_tasks_per_s":    float64(n) / schedTime.Seconds(),
		"drain_tasks_per_s":       float64(n) / tr.lastAck.Sub(start).Seconds(),
		"drain_requests_per_task": float64(d.requests-req0) / float64(n),
		"lateness_p50_ms":         p50, "lateness_p99_ms": p99, "lateness_max_ms": mx, "lost": lost, "duplicates": dups,
		"left": len(d.left), "settle_s": d.took.Seconds()})
	return nil
}

// scheduleAll schedules n tasks with ScheduleTasks in calls of 1,000, due at due(i) (zero:
// now), and returns their IDs and how long it took.
func scheduleAll(ctx context.Context, s *shardq.Driver, queue string, n int, due func(i int) time.Time) ([]uuid.UUID, time.Duration, error) {
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return nil, 0, err
	}
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: queue, Payload: payload, Priority: i % 10, DueAt: due(i)}
	}
	ids := make([]uuid.UUID, 0, n)
	t0 := time.Now()
	for chunk := range slices.Chunk(tasks, 1000) {
		got, err := p.ScheduleTasks(ctx, chunk)
		if err != nil {
			return nil, 0, err
		}
		ids = append(ids, got...)
	}
	return ids, time.Since(t0), nil
}

// payload is every bench task's payload: a small JSON document's worth of bytes.
var payload = []byte(`{"user":12345,"action":"send-welcome-email","attempt":0}`)
