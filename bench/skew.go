package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// What skew hands its child processes, besides what trickle does.
const (
	tasksEnv       = "SHARDQ_BENCH_TASKS"
	startEnv       = "SHARDQ_BENCH_START"       // Unix ns at which the producers begin, by the real clock
	clocksEnv      = "SHARDQ_BENCH_CLOCKS"      // every producer's clock offset, e.g. "-4s,0s"; task i is producer i mod their number's
	mineEnv        = "SHARDQ_BENCH_MINE"        // the producers this process runs, e.g. "0,1"
	dueEnv         = "SHARDQ_BENCH_DUE"         // "now" or "ahead"
	clockEnv       = "SHARDQ_BENCH_CLOCK"       // a worker's clock offset
	skewAsEnv      = "SHARDQ_BENCH_SKEW_AS"     // -skew-as
	concurrencyEnv = "SHARDQ_BENCH_CONCURRENCY" // a worker's Concurrency

	roleSkewProducer = "skew-producer"
	roleSkewWorker   = "skew-worker"

	// The skewed clocks' queue; its layout comes from -bucket and -buckets.
	skewShards  = 8
	skewTimeout = 5 * time.Second
	// How long after the workers are ready the producers begin: time to connect.
	skewLead = 2 * time.Second
)

// skewBound is the README's promise for a row written later than MaxClockSkew: delivered
// within SweepInterval plus one poll interval (a worker with default settings polls at
// least every DefaultMaxIdleInterval) of its write.
const skewBound = consumer.SweepInterval + worker.DefaultMaxIdleInterval

// offsetClock is the real clock moved by a fixed offset: negative trails, positive leads.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// skewClock is a part's clock offset from the real one: the part's Config.Clock itself
// (-skew-as clock), or the default clock, the cluster's time, as measured on a host whose
// clock is that offset (host).
func skewClock(s *shardq.Driver, offset time.Duration) shardqtype.Clock {
	if os.Getenv(skewAsEnv) == "host" {
		return clustertime.New(store.Of(s.Session()), offsetClock(offset), nil)
	}
	return offsetClock(offset)
}

// skewDelivery is one handler start, as a worker process printed it.
type skewDelivery struct {
	id         uuid.UUID
	attempt    int
	start, due time.Time // start by the real clock; due is DueAt, by the producer's clock
}

// skew measures skewed clocks: tasks scheduled by two producers, one whose clock trails by
// -producer-skew and one on time, in one process or two, consumed by -workers worker
// processes whose clocks lead by -worker-skew. With -skew-due now the tasks are due at
// once and scheduled evenly over -skew-over; with ahead they are all scheduled at the
// start, due evenly over -skew-over. Every time below is by the real clock: a task's real
// due time is its DueAt less its producer's offset, which for a task due now is when the
// producer scheduled it. A delivery is early if its handler started before that, late by
// how long after it started, and a task is lost if no handler started by -skew-bound
// after the last due time.
func (b *bench) skew(ctx context.Context) error {
	o := b.o
	if o.skewTasks <= 0 || o.skewOver <= 0 || o.workers <= 0 || o.concurrency <= 0 {
		return fmt.Errorf("-skew-tasks, -skew-over, -workers and -concurrency must be positive")
	}
	if o.skewAs != "clock" && o.skewAs != "host" {
		return fmt.Errorf("-skew-as %q: want clock or host", o.skewAs)
	}
	if o.skewDue != "now" && o.skewDue != "ahead" {
		return fmt.Errorf("-skew-due %q: want now or ahead", o.skewDue)
	}
	clocks := []time.Duration{-o.producerSkew, 0}
	groups := map[string][]string{"one": {"0,1"}, "two": {"0", "1"}}[o.producersIn]
	if groups == nil {
		return fmt.Errorf("-producers-in %q: want one or two", o.producersIn)
	}
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "skew", BucketCount: o.buckets, BucketDuration: o.bucket,
		ShardCount: skewShards, DefaultTimeout: skewTimeout})
	if err != nil {
		return err
	}
	// Clipped, so that each append below makes a copy of its own.
	env := slices.Clip(append(os.Environ(), hostsEnv+"="+strings.Join(b.hosts, ","), keyspaceEnv+"="+b.o.keyspace, queueEnv+"="+q.Name,
		skewAsEnv+"="+o.skewAs, driverEnv+"="+o.driver))
	tr := newTracker(o.skewTasks)
	var mu sync.Mutex // guards what the children's lines fill in
	var (
		deliveries         []skewDelivery
		acked, leaseLost   int
		deadline           time.Time
		producerOf         = make(map[uuid.UUID]int, o.skewTasks)
		ids                []uuid.UUID
		failed             int
		workers, producers []*child
	)
	defer func() {
		for _, c := range append(producers, workers...) {
			c.stop(5 * time.Second) //nolint:errcheck // only reached first on an error path
		}
	}()

	workerEnv := slices.Clip(append(env, clockEnv+"="+o.workerSkew.String(), concurrencyEnv+"="+strconv.Itoa(o.concurrency)))
	for range o.workers {
		w, err := startReady(roleSkewWorker, workerEnv, func(line string) error {
			mu.Lock()
			defer mu.Unlock()
			var a, l int
			if _, err := fmt.Sscanf(line, "stats %d %d", &a, &l); err == nil {
				acked, leaseLost = acked+a, leaseLost+l
				return nil
			}
			d, err := parseSkewDelivery(line)
			if err != nil {
				return err
			}
			if d.start.After(deadline) {
				return nil // past the bound: the task counts as lost
			}
			deliveries = append(deliveries, d)
			tr.deliver(d.id)
			return nil
		})
		if err != nil {
			return err
		}
		workers = append(workers, w)
	}

	start := time.Now().Add(skewLead)
	mu.Lock()
	deadline = start.Add(o.skewOver + o.skewBound)
	mu.Unlock()
	producerEnv := slices.Clip(append(env, tasksEnv+"="+strconv.Itoa(o.skewTasks), durationEnv+"="+o.skewOver.String(),
		startEnv+"="+strconv.FormatInt(start.UnixNano(), 10), dueEnv+"="+o.skewDue,
		clocksEnv+"="+clocks[0].String()+","+clocks[1].String()))
	for _, mine := range groups {
		p, err := startChild(roleSkewProducer, append(producerEnv, mineEnv+"="+mine), func(line string) error {
			mu.Lock()
			defer mu.Unlock()
			id, which, _ := strings.Cut(line, " ")
			p, err := strconv.Atoi(which)
			if err != nil || p < 0 || p >= len(clocks) {
				return fmt.Errorf("unexpected line %q", line)
			}
			if id == "fail" {
				failed++
				return nil
			}
			u, err := uuid.Parse(id)
			if err != nil {
				return fmt.Errorf("unexpected line %q", line)
			}
			producerOf[u] = p
			ids = append(ids, u)
			return nil
		})
		if err != nil {
			return err
		}
		producers = append(producers, p)
	}
	stop := make(chan struct{})
	go progress("skew", o.skewTasks, func() int { return int(tr.delivered.Load()) }, stop)

	// Until the producers are done and every task they scheduled ran, or the bound passes.
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for done := false; !done && time.Now().Before(deadline); {
		<-poll.C
		done = true
		for _, c := range producers {
			select {
			case <-c.read:
			default:
				done = false
			}
		}
		mu.Lock()
		done = done && tr.delivered.Load() >= int64(len(ids))
		mu.Unlock()
	}
	close(stop)
	// Workers stop gracefully: running handlers finish and acks flush before the table is read.
	for _, c := range append(producers, workers...) {
		if err := c.stop(time.Minute); err != nil {
			return fmt.Errorf("%s: %w", c.role, err)
		}
	}
	rows, err := taskscan.TaskIDs(ctx, s, q, 16, taskscan.PageSize)
	if err != nil {
		return err
	}
	left := len(rows)

	mu.Lock()
	defer mu.Unlock()
	lost, dups := tr.lostAndDuplicates(ids, nil) // rows left are counted apart, as still_in_table
	// By task: its real due time and its first handler start.
	type firstRun struct{ due, start time.Time }
	first := make(map[uuid.UUID]firstRun, len(ids))
	early, unknown, redelivered := 0, 0, 0
	var earliest time.Duration
	for _, d := range deliveries {
		p, ok := producerOf[d.id]
		if !ok {
			unknown++ // a task whose ScheduleTask call failed, yet was written
			continue
		}
		if d.attempt > 1 {
			redelivered++
		}
		due := d.due.Add(-clocks[p])
		if d.start.Before(due) {
			early++
			earliest = max(earliest, due.Sub(d.start))
		}
		if f, ok := first[d.id]; !ok || d.start.Before(f.start) {
			first[d.id] = firstRun{due, d.start}
		}
	}
	lateness := make([]time.Duration, 0, len(first))
	latenessBy := make([][]time.Duration, len(clocks))
	lostBy, beyondBy := make([]int, len(clocks)), make([]int, len(clocks))
	for _, id := range ids {
		f, ok := first[id]
		switch {
		case !ok:
			lostBy[producerOf[id]]++
		case f.start.Sub(f.due) > skewBound:
			beyondBy[producerOf[id]]++
		}
		if ok {
			lateness = append(lateness, f.start.Sub(f.due))
			latenessBy[producerOf[id]] = append(latenessBy[producerOf[id]], f.start.Sub(f.due))
		}
	}
	p50, p99, mx := percentiles(lateness)
	var p50By, p99By []float64
	for _, l := range latenessBy {
		p50, p99, _ := percentiles(l)
		p50By, p99By = append(p50By, p50), append(p99By, p99)
	}
	clocksS := []float64{clocks[0].Seconds(), clocks[1].Seconds()}
	b.emit(result{"workload": "skew", "tasks": len(ids), "schedule_errors": failed, "delivered": len(first),
		"lost": lost, "still_in_table": left, "early": early, "early_max_ms": ms(earliest), "duplicates": dups,
		"redeliveries": redelivered, "lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_max_ms": mx,
		"lateness_p50_ms_by_producer": p50By, "lateness_p99_ms_by_producer": p99By,
		"bound_ms": ms(skewBound), "beyond_bound": beyondBy[0] + beyondBy[1],
		"producer_clocks_s": clocksS, "lost_by_producer": lostBy, "beyond_bound_by_producer": beyondBy,
		"unknown_deliveries": unknown, "acked": acked, "lease_lost": leaseLost,
		"producers_in": o.producersIn, "skew_as": o.skewAs, "workers": o.workers, "concurrency": o.concurrency,
		"worker_skew_s": o.workerSkew.Seconds(), "due": o.skewDue, "over_s": o.skewOver.Seconds(),
		"wait_after_last_due_s": o.skewBound.Seconds(), "bucket_s": o.bucket.Seconds(), "buckets": o.buckets,
		"shards": skewShards, "timeout_s": skewTimeout.Seconds()})
	return nil
}

// parseSkewDelivery reads a skew worker's "<task ID> <attempt> <start ns> <DueAt ns>".
func parseSkewDelivery(line string) (skewDelivery, error) {
	f := strings.Fields(line)
	var d skewDelivery
	var err error
	var start, due int64
	if len(f) == 4 {
		d.id, err = uuid.Parse(f[0])
		if err == nil {
			d.attempt, err = strconv.Atoi(f[1])
		}
		if err == nil {
			start, err = strconv.ParseInt(f[2], 10, 64)
		}
		if err == nil {
			due, err = strconv.ParseInt(f[3], 10, 64)
		}
	}
	if len(f) != 4 || err != nil {
		return d, fmt.Errorf("unexpected line %q", line)
	}
	d.start, d.due = time.Unix(0, start), time.Unix(0, due)
	return d, nil
}

// skewProducer runs the producers mineEnv names, producer p with its clock offset by the
// p-th of clocksEnv, and schedules their share of tasksEnv tasks: task i is producer
// i mod len(clocks)'s, sent at startEnv plus i/tasks of durationEnv ("now": due now) or
// at startEnv ("ahead": due then, by its producer's clock). It prints "<task ID> <p>" for
// each task scheduled and "fail <p>" for each call that failed (the error on stderr).
func skewProducer(ctx context.Context) error {
	n, err := strconv.Atoi(os.Getenv(tasksEnv))
	if err != nil {
		return err
	}
	over, err := time.ParseDuration(os.Getenv(durationEnv))
	if err != nil {
		return err
	}
	startNs, err := strconv.ParseInt(os.Getenv(startEnv), 10, 64)
	if err != nil {
		return err
	}
	var clocks []time.Duration
	for _, c := range strings.Split(os.Getenv(clocksEnv), ",") {
		d, err := time.ParseDuration(c)
		if err != nil {
			return err
		}
		clocks = append(clocks, d)
	}
	s, closeSession, queue, err := childSession(nil)
	if err != nil {
		return err
	}
	defer closeSession()
	ps := make([]*producer.Producer, len(clocks))
	for _, m := range strings.Split(os.Getenv(mineEnv), ",") {
		p, err := strconv.Atoi(m)
		if err != nil || p < 0 || p >= len(clocks) {
			return fmt.Errorf("%s %q", mineEnv, os.Getenv(mineEnv))
		}
		if ps[p], err = producer.New(s, producer.Config{Clock: skewClock(s, clocks[p])}); err != nil {
			return err
		}
	}
	var mine []int // the indexes of this process's tasks
	for i := range n {
		if ps[i%len(clocks)] != nil {
			mine = append(mine, i)
		}
	}
	start, ahead := time.Unix(0, startNs), os.Getenv(dueEnv) == "ahead"
	step := over / time.Duration(n)
	at := func(k int) time.Time {
		if ahead {
			return start
		}
		return start.Add(time.Duration(mine[k]) * step)
	}
	return paced(ctx, len(mine), at, func(ctx context.Context, k int) error {
		i := mine[k]
		p := i % len(clocks)
		t := producer.Task{Queue: queue, Payload: payload}
		if ahead {
			t.DueAt = start.Add(clocks[p] + time.Duration(i)*step)
		}
		id, err := ps[p].ScheduleTask(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return nil // told to stop
			}
			fmt.Fprintf(os.Stderr, "skew: producer %d: %v\n", p, err)
			return out.printf("fail %d\n", p)
		}
		return out.printf("%s %d\n", id, p)
	})
}

// skewWorker runs a worker with Concurrency concurrencyEnv, its clock offset by
// clockEnv, until told to stop. As each handler starts it prints
// "<task ID> <attempt> <start ns by the real clock> <DueAt ns>"; once stopped,
// "stats <acked> <lease lost>".
func skewWorker(ctx context.Context) error {
	offset, err := time.ParseDuration(os.Getenv(clockEnv))
	if err != nil {
		return err
	}
	concurrency, err := strconv.Atoi(os.Getenv(concurrencyEnv))
	if err != nil {
		return err
	}
	s, closeSession, queue, err := childSession(nil)
	if err != nil {
		return err
	}
	defer closeSession()
	st, err := serveWorker(ctx, s, worker.Config{Queue: queue, Concurrency: concurrency, Clock: skewClock(s, offset),
		Handler: worker.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			start := time.Now()
			out.printf("%s %d %d %d\n", t.ID, t.Attempt, start.UnixNano(), t.DueAt.UnixNano()) //nolint:errcheck // a parent gone also closes stdin
			return nil
		})})
	if err != nil {
		return err
	}
	return out.printf("stats %d %d\n", st.Acked, st.LeaseLost)
}
