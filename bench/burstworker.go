package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// burstWorker schedules N tasks due at once on a queue with default settings, then
// drains them with one worker (Concurrency H, every other setting at its default), and
// measures the drain and, for a local node, the server's CPU seconds spent on it. With
// -via client the tasks are inserted by a client, which then drains them with its one
// worker for the queue (Concurrency H).
func (b *bench) burstWorker(ctx context.Context) error {
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "burstworker"})
	if err != nil {
		return err
	}
	n := b.o.burstWorkerTasks
	tr := newTracker(n)
	var partitionErrors, acked atomic.Int64 // acked counts as worker.Stats.Acked does
	obs := shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) {
		switch e := e.(type) {
		case shardqtype.PartitionFailed:
			partitionErrors.Add(1)
		case shardqtype.Acked:
			acked.Add(int64(e.Count))
		}
	})
	// deliver, not record: lateness is burst's figure; a million of them is not needed here
	w, ids, schedTime, err := b.burstTasks(ctx, s, q.Name, n, obs, tr.deliver)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	go progress("burst-worker drain", n, func() int { return int(acked.Load()) }, stop)
	pid := b.cassandraPIDs()
	cpu0, cpuErr := cpuSeconds(pid)
	req0, start := b.requests.Load(), time.Now() // every task is due by now
	if err := w.Start(ctx); err != nil {
		close(stop)
		return err
	}
	var waitErr error
	limit := time.After(30 * time.Minute)
	poll := time.NewTicker(10 * time.Millisecond)
	// CPU at 10%, 20%, 80% and 90% of the drain: whether a task drained late in a big
	// backlog costs more than one drained early.
	marks := []float64{0.1, 0.2, 0.8, 0.9}
	var cpuAt []float64
wait:
	for done := acked.Load(); done < int64(n); done = acked.Load() {
		for len(cpuAt) < len(marks) && float64(done) >= marks[len(cpuAt)]*float64(n) {
			c, _ := cpuSeconds(pid)
			cpuAt = append(cpuAt, c)
		}
		select {
		case <-poll.C:
		case <-limit:
			waitErr = fmt.Errorf("only %d of %d tasks acked within 30m", acked.Load(), n)
			break wait
		}
	}
	end := time.Now()
	cpu1, cpuErr1 := cpuSeconds(pid)
	reqs := b.requests.Load() - req0
	poll.Stop()
	close(stop)
	var set settled
	if waitErr == nil {
		set, waitErr = b.settle(ctx, s, q)
	}
	if err := stopWorker(ctx, w, waitErr); err != nil {
		return err
	}
	lost, dups := tr.lostAndDuplicates(ids, set.left)
	r := result{"workload": "burst-worker", "via": b.o.via, "tasks": n, "handlers": b.o.burstWorkerHandlers,
		"schedule_tasks_per_s": float64(n) / schedTime.Seconds(),
		"drain_tasks_per_s":    float64(n) / end.Sub(start).Seconds(),
		"requests_per_task":    float64(reqs) / float64(n),
		"lost":                 lost, "duplicates": dups, "partition_errors": partitionErrors.Load(),
		"left": len(set.left), "settle_s": set.took.Seconds()}
	if cpuErr == nil && cpuErr1 == nil {
		r["server_cpu_s"] = cpu1 - cpu0
		r["server_cpu_ms_per_1k_tasks"] = (cpu1 - cpu0) * 1000 / (float64(n) / 1000)
		if len(cpuAt) == len(marks) {
			tenth := float64(n) / 10 / 1000
			r["server_cpu_ms_per_1k_tasks_10_20pct"] = (cpuAt[1] - cpuAt[0]) * 1000 / tenth
			r["server_cpu_ms_per_1k_tasks_80_90pct"] = (cpuAt[3] - cpuAt[2]) * 1000 / tenth
		}
	}
	b.emit(r)
	return nil
}

// burstTasks schedules burst-worker's n tasks, all due now, and returns them, how long
// scheduling took, and what is to drain them (not started): a worker with H handlers, or
// with -via client the client that inserted them, serving the queue with H. Either runs
// deliver on each task and gives obs its events.
func (b *bench) burstTasks(ctx context.Context, s *shardq.Driver, queue string, n int, obs shardqtype.Observer,
	deliver func(uuid.UUID)) (runner, []uuid.UUID, time.Duration, error) {
	now := func(int) time.Time { return time.Time{} }
	if b.o.via == viaClient {
		c, err := newClient(s, []string{queue}, b.o.burstWorkerHandlers, obs, func(t *shardq.Task[benchArgs]) { deliver(t.ID) })
		if err != nil {
			return nil, nil, 0, err
		}
		ids, took, err := insertAll(ctx, c, queue, n, now)
		return c, ids, took, err
	}
	ids, took, err := scheduleAll(ctx, s, queue, n, now)
	if err != nil {
		return nil, nil, 0, err
	}
	w, err := worker.New(s, worker.Config{Queue: queue, Concurrency: b.o.burstWorkerHandlers, Observer: obs,
		Handler: worker.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			deliver(t.ID)
			return nil
		})})
	return w, ids, took, err
}
