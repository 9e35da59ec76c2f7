package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shardq/shardq/shardqtype"
)

// steady measures the queue under steady load: rate × duration tasks, all
// scheduled up front on a queue with default settings, due evenly at rate a second from
// a first due time, drained by one worker in this process (burst-worker's handler count,
// every other setting at its default). It reports lateness (handler start minus due
// time), early deliveries, and the server's CPU seconds and the CQL requests over the
// measured window. That window runs from the first due time until every task had been
// delivered once (the last task's delivery), so the scheduling, the worker's start and its
// first poll (which looks back a whole lap) fall before it, and the last acks and
// settling after it.
func (b *bench) steady(ctx context.Context) error {
	rate, over := b.o.steadyRate, b.o.steadyDuration
	if rate <= 0 || over <= 0 {
		return fmt.Errorf("-rate and -duration must be positive")
	}
	n := int(float64(rate) * over.Seconds())
	lead := b.o.steadyLead
	if lead == 0 {
		// Scheduling at 10,000 tasks/s, a third of the slowest rate burst and burst-worker
		// recorded in results/ on 2026-11-25, plus time for the worker's start and first poll.
		lead = 5*time.Second + time.Duration(n)*time.Second/10_000
	}
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "steady"})
	if err != nil {
		return err
	}
	// Due times in whole milliseconds, as Cassandra stores them, so that the DueAt a
	// handler sees is the time asked for and an early delivery is one.
	first := time.Now().Add(lead).Truncate(time.Millisecond)
	due := func(i int) time.Time {
		return first.Add(time.Duration(i) * time.Second / time.Duration(rate)).Truncate(time.Millisecond)
	}
	ids, _, err := scheduleAll(ctx, s, q.Name, n, due)
	if err != nil {
		return err
	}
	tr := newTracker(n)
	w, err := startRecording(ctx, s, q.Name, b.o.burstWorkerHandlers, tr)
	if err != nil {
		return err
	}
	for w.Stats().Polls == 0 && time.Now().Before(first) {
		time.Sleep(10 * time.Millisecond)
	}
	// Late here, the window would hold scheduling or the worker's start, and lateness
	// their cost.
	if polled := w.Stats().Polls > 0; !polled || !time.Now().Before(first) {
		return stopWorker(ctx, w, fmt.Errorf("scheduling %d tasks and the worker's first poll (done: %v) took longer than the %v lead; set -steady-lead",
			n, polled, lead))
	}
	time.Sleep(time.Until(first))

	pid := b.cassandraPIDs()
	cpu0, cpuErr := cpuSeconds(pid)
	req0, kinds0, start := b.requests.Load(), b.counter().snapshot(), time.Now()
	stop := make(chan struct{})
	go progress("steady", n, func() int { return int(tr.delivered.Load()) }, stop)
	var waitErr error
	select {
	case <-tr.all:
	case <-time.After(over + 2*time.Minute):
		waitErr = fmt.Errorf("only %d of %d tasks ran", tr.delivered.Load(), n)
	}
	cpu1, cpuErr1 := cpuSeconds(pid)
	reqs, kinds, window := b.requests.Load()-req0, b.counter().since(kinds0), time.Since(start)
	close(stop)
	set, lost, dups, err := b.stopRecording(ctx, s, q, w, tr, ids, waitErr)
	if err != nil {
		return err
	}
	early := 0
	for _, l := range tr.lateness {
		if l < 0 {
			early++
		}
	}
	p50, p99, mx := percentiles(tr.lateness)
	r := result{"workload": "steady", "rate": rate, "duration_s": over.Seconds(), "tasks": n,
		"handlers": b.o.burstWorkerHandlers, "lead_s": lead.Seconds(),
		"lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_max_ms": mx, "early": early,
		"lost": lost, "duplicates": dups, "left": len(set.left), "settle_s": set.took.Seconds(),
		"window_s": window.Seconds(), "requests": reqs, "requests_per_task": float64(reqs) / float64(n),
		"requests_per_s": float64(reqs) / window.Seconds(), "requests_by_kind": kinds}
	if cpuErr == nil && cpuErr1 == nil {
		r["server_cpu_s"] = cpu1 - cpu0
		r["server_cpu_ms_per_1k_tasks"] = (cpu1 - cpu0) * 1000 / (float64(n) / 1000)
	}
	b.emit(r)
	return nil
}
