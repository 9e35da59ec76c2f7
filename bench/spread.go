package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// spread starts workers, then schedules N tasks due uniformly over the next T, in due
// order, and measures lateness as handler start minus due time, overall and for the tasks
// due in each tenth of T.
func (b *bench) spread(ctx context.Context) error {
	s, q, err := b.fresh(ctx, b.queueConfig("spread"))
	if err != nil {
		return err
	}
	n := b.o.spreadTasks
	tr := newTracker(n)
	w, err := startRecording(ctx, s, q.Name, b.o.spreadHandlers, tr)
	if err != nil {
		return err
	}
	// Scheduled in due order, as the peer benchmark enqueues: a task due early is not
	// written after tasks due later, so what lateness the run shows is the queue's.
	start := time.Now().Add(time.Second)
	span := int64(b.o.spreadOver)
	dues := make([]time.Time, n)
	for i := range dues {
		dues[i] = start.Add(time.Duration(rand.Int64N(span + 1)))
	}
	slices.SortFunc(dues, time.Time.Compare)
	ids, _, err := scheduleAll(ctx, s, q.Name, n, func(i int) time.Time { return dues[i] })
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	go progress("spread", n, func() int { return int(tr.delivered.Load()) }, stop)
	var waitErr error
	select {
	case <-tr.all:
	case <-time.After(b.o.spreadOver + 2*time.Minute):
		waitErr = fmt.Errorf("only %d of %d tasks ran", tr.delivered.Load(), n)
	}
	close(stop)
	set, lost, dups, err := b.stopRecording(ctx, s, q, w, tr, ids, waitErr)
	if err != nil {
		return err
	}
	p50, p99, mx := percentiles(tr.lateness)
	b.emit(result{"workload": "spread", "tasks": n, "over_s": b.o.spreadOver.Seconds(), "handlers": b.o.spreadHandlers,
		"shards": q.ShardCount, "lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_max_ms": mx,
		"lateness_p99_by_tenth_ms": tr.p99ByTenth(start, b.o.spreadOver),
		"lost":                     lost, "duplicates": dups, "left": len(set.left), "settle_s": set.took.Seconds()})
	return nil
}

// runner is what runs a workload's tasks: a *worker.Worker, or a *shardq.Client.
type runner interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// stopWorker stops a workload's worker (or client), allowing it a minute, and then
// returns the error the workload met while waiting for its tasks, if any.
func stopWorker(ctx context.Context, w runner, waitErr error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		return err
	}
	return waitErr
}
