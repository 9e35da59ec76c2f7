package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// idle runs a worker with default settings on an empty queue and counts its CQL requests
// (by kind too) and, for a local node, the server's CPU seconds over the window. With -via client it
// runs a client with default settings serving -idle-queues such queues instead.
func (b *bench) idle(ctx context.Context) error {
	cfg := shardqtype.QueueConfig{Name: "idle", BucketCount: b.o.idleBuckets, ShardCount: b.o.idleShards}
	s, q, err := b.fresh(ctx, cfg)
	if err != nil {
		return err
	}
	queues := []string{q.Name}
	for i := 1; i < b.o.idleQueues; i++ {
		cfg.Name = fmt.Sprintf("idle-%d", i)
		if _, err := shardq.CreateQueue(ctx, s, cfg); err != nil {
			return err
		}
		queues = append(queues, cfg.Name)
	}
	if err := b.pendingRetries(ctx, s, q); err != nil {
		return err
	}
	var acked atomic.Uint64 // as worker.Stats.Acked counts
	obs := shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) {
		if e, ok := e.(shardqtype.Acked); ok {
			acked.Add(uint64(e.Count))
		}
	})
	// The first poll looks back a whole lap; measure the steady state after it.
	var polls func() uint64
	var startup int64      // a client's requests from its start until it is idle
	var firstStartup int64 // with -idle-restart-after, the first client's
	if b.o.via == viaClient {
		start := func() (*shardq.Client, int64, error) {
			before := b.requests.Load()
			c, err := newClient(s, queues, 0, obs, func(*shardq.Task[benchArgs]) {})
			if err != nil {
				return nil, 0, err
			}
			if err := c.Start(ctx); err != nil {
				return nil, 0, err
			}
			if err := waitPolled(ctx, len(queues), b.requests.Load); err != nil {
				return nil, 0, errors.Join(err, c.Stop(ctx))
			}
			return c, b.requests.Load() - before, nil
		}
		c, n, err := start()
		if err != nil {
			return err
		}
		if b.o.idleRestartAfter > 0 {
			firstStartup = n
			fmt.Fprintf(os.Stderr, "idle: a first client serves the queues for %v, then the next starts\n", b.o.idleRestartAfter)
			time.Sleep(b.o.idleRestartAfter)
			if err := c.Stop(ctx); err != nil {
				return err
			}
			if c, n, err = start(); err != nil {
				return err
			}
		}
		defer c.Stop(ctx) //nolint:errcheck // stopping an idle client cannot lose work
		startup = n
	} else {
		w, err := worker.New(s, worker.Config{Queue: q.Name, MaxIdleInterval: b.o.idleInterval, Observer: obs,
			Handler: worker.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })})
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer w.Stop(ctx) //nolint:errcheck // stopping an idle worker cannot lose work
		for w.Stats().Polls == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		polls = func() uint64 { return w.Stats().Polls }
	}
	// Setting up -pending leases its tasks and retries them, which leaves the leases'
	// buckets touched until they pass: measure once they have.
	var settle time.Duration
	if b.o.idlePending > 0 {
		settle = q.DefaultTimeout + q.BucketDuration + consumer.DefaultMaxClockSkew
		fmt.Fprintf(os.Stderr, "idle: waiting %v for the setup's leases to pass\n", settle)
		time.Sleep(settle)
	}
	pid := b.cassandraPIDs()
	cpu0, cpuErr := cpuSeconds(pid)
	req0, kinds0, acked0, self0, t0 := b.requests.Load(), b.counter().snapshot(), acked.Load(), selfCPU(), time.Now()
	fmt.Fprintf(os.Stderr, "idle: counting requests for %v\n", b.o.idleFor)
	time.Sleep(b.o.idleFor)
	reqs, kinds, span := b.requests.Load()-req0, b.counter().since(kinds0), time.Since(t0)
	r := result{"workload": "idle", "via": b.o.via, "queues": len(queues), "buckets": q.BucketCount,
		"bucket_s": q.BucketDuration.Seconds(), "shards": q.ShardCount, "pending": b.o.idlePending, "settle_s": settle.Seconds(),
		"window_s": span.Seconds(), "idle_requests_per_s": float64(reqs) / span.Seconds(), "requests_by_kind": kinds,
		"delivered": acked.Load() - acked0, "bench_cpu_s": selfCPU() - self0}
	if polls != nil {
		r["polls"] = polls()
	} else {
		r["startup_requests"] = startup
		if b.o.idleRestartAfter > 0 {
			r["restart_after_s"], r["first_startup_requests"] = b.o.idleRestartAfter.Seconds(), firstStartup
		}
	}
	if cpu1, err := cpuSeconds(pid); cpuErr == nil && err == nil {
		r["server_cpu_s"] = cpu1 - cpu0
	}
	b.emit(r)
	return nil
}

// cassandraPIDs finds the local nodes to measure: those whose PID files -cassandra-pid
// names, else one process running CassandraDaemon. Empty when there is none.
func (b *bench) cassandraPIDs() []int {
	var pids []int
	for _, f := range strings.Split(b.o.cassandraPIDFile, ",") {
		if raw, err := os.ReadFile(f); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) > 0 {
		return pids
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd), "CassandraDaemon") {
			return []int{pid}
		}
	}
	return nil
}

// cpuSeconds reads the processes' user+system CPU time, summed, from /proc (clock ticks
// of 1/100 s).
func cpuSeconds(pids []int) (float64, error) {
	if len(pids) == 0 {
		return 0, fmt.Errorf("no local node")
	}
	total := 0.0
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// Fields after the command name, which is in parentheses and may hold spaces.
		fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		utime, err1 := strconv.ParseFloat(fields[11], 64)
		stime, err2 := strconv.ParseFloat(fields[12], 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
		}
		total += (utime + stime) / 100
	}
	return total, nil
}

// pendingRetries leaves -pending tasks backed off: taken once and retried with delays
// spread over the lap, as failing tasks wait between attempts.
func (b *bench) pendingRetries(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig) error {
	n := b.o.idlePending
	if n == 0 {
		return nil
	}
	if _, _, err := scheduleAll(ctx, s, q.Name, n, func(int) time.Time { return time.Time{} }); err != nil {
		return err
	}
	c, err := consumer.New(s, consumer.Config{Queue: q.Name})
	if err != nil {
		return err
	}
	var tasks []*consumer.Task
	for len(tasks) < n {
		got, err := c.AcquireTasks(ctx, n-len(tasks))
		if err != nil {
			return err
		}
		tasks = append(tasks, got...)
	}
	for i, t := range tasks {
		delay := q.MaxTimeout() * time.Duration(i+1) / time.Duration(n)
		if err := c.Retry(ctx, t, delay); err != nil {
			return err
		}
	}
	return nil
}
