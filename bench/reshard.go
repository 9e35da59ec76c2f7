package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// reshard measures a layout change under steady load: a producer in this
// process schedules tasks due one second after their write at -reshard-rate a second,
// on a queue with default settings, drained by one worker (burst-worker's handler
// count); one window after the start the layout changes to -reshard-shards shards (and
// -reshard-bucket buckets, if set). It reports, for the tasks due in each of three
// windows (before the change was made, around the time it takes effect, and a window
// after that), the throughput (handler starts per second) and lateness (handler start
// minus due time), and, over the whole run, early deliveries, lost tasks and duplicates.
func (b *bench) reshard(ctx context.Context) error {
	rate, win := b.o.reshardRate, b.o.reshardWindow
	if rate <= 0 || win <= 0 {
		return fmt.Errorf("-reshard-rate and -reshard-window must be positive")
	}
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "reshard"})
	if err != nil {
		return err
	}
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	due := map[uuid.UUID]time.Time{}
	started := map[uuid.UUID]time.Time{} // each task's first handler start
	runs := 0
	tr := newTracker(0)
	w, err := worker.New(s, worker.Config{Queue: q.Name, Concurrency: b.o.burstWorkerHandlers,
		Handler: worker.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			runs++
			if _, ok := started[t.ID]; !ok {
				started[t.ID] = now
			}
			return nil
		})})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}

	// The producer, until stop: every tick, rate/20 tasks due a second on (whole ms, as
	// stored, so that an early start is one).
	stop, produced := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		per, carry := rate/20, rate%20
		for i := 0; ; i++ {
			select {
			case <-stop:
				produced <- nil
				return
			case <-tick.C:
			}
			n := per
			if i%20 < carry {
				n++
			}
			if n == 0 {
				continue
			}
			tasks := make([]producer.Task, n)
			at := time.Now().Add(time.Second).Truncate(time.Millisecond)
			for j := range tasks {
				tasks[j] = producer.Task{Queue: q.Name, DueAt: at}
			}
			ids, err := p.ScheduleTasks(ctx, tasks)
			if err != nil {
				produced <- err
				return
			}
			mu.Lock()
			for _, id := range ids {
				due[id] = at
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	time.Sleep(win)
	changed := time.Now()
	ch, err := shardq.ChangeLayout(ctx, s, q.Name, shardqtype.LayoutConfig{ShardCount: b.o.reshardShards, BucketDuration: b.o.reshardBucket})
	if err != nil {
		close(stop)
		return stopWorker(ctx, w, err)
	}
	fmt.Printf("reshard: layout %d takes effect in %v\n", ch.Generation, time.Until(ch.From).Round(time.Millisecond))
	windows := []struct {
		name     string
		from, to time.Time
	}{
		{"before", changed.Add(-win), changed},
		{"during", ch.From.Add(-win / 2), ch.From.Add(win / 2)},
		{"after", ch.From.Add(win), ch.From.Add(2 * win)},
	}
	time.Sleep(time.Until(windows[2].to))
	close(stop)
	if err := <-produced; err != nil {
		return stopWorker(ctx, w, fmt.Errorf("scheduling: %w", err))
	}
	mu.Lock()
	n := len(due)
	mu.Unlock()
	var waitErr error
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		done := len(started) >= n
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			waitErr = fmt.Errorf("not every task ran within 2m of the last due time")
			break
		}
	}
	set, err := b.settle(ctx, s, q)
	if waitErr == nil {
		waitErr = err
	}
	if err := stopWorker(ctx, w, waitErr); err != nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	ids := make([]uuid.UUID, 0, len(due))
	early := 0
	for id, at := range due {
		ids = append(ids, id)
		if st, ok := started[id]; ok {
			tr.record(id, st.Sub(at))
			if st.Before(at) {
				early++
			}
		}
	}
	lost, _ := tr.lostAndDuplicates(ids, set.left)
	bucketAfter := b.o.reshardBucket
	if bucketAfter == 0 {
		bucketAfter = q.BucketDuration
	}
	r := result{"workload": "reshard", "rate": rate, "window_s": win.Seconds(), "tasks": n,
		"handlers":      b.o.burstWorkerHandlers,
		"shards_before": q.ShardCount, "shards_after": b.o.reshardShards,
		"bucket_before_ms": ms(q.BucketDuration), "bucket_after_ms": ms(bucketAfter),
		"change_at_s": changed.Sub(start).Seconds(), "takes_effect_after_s": ch.From.Sub(changed).Seconds(),
		"early": early, "lost": lost, "duplicates": runs - len(started), "left": len(set.left), "settle_s": set.took.Seconds()}
	for _, wnd := range windows {
		var late []time.Duration
		starts := 0
		for id, at := range due {
			if !at.Before(wnd.from) && at.Before(wnd.to) {
				if st, ok := started[id]; ok {
					late = append(late, st.Sub(at))
				}
			}
		}
		for _, st := range started {
			if !st.Before(wnd.from) && st.Before(wnd.to) {
				starts++
			}
		}
		p50, p99, mx := percentiles(late)
		r[wnd.name+"_throughput_per_s"] = float64(starts) / wnd.to.Sub(wnd.from).Seconds()
		r[wnd.name+"_lateness_p50_ms"], r[wnd.name+"_lateness_p99_ms"], r[wnd.name+"_lateness_max_ms"] = p50, p99, mx
	}
	b.emit(r)
	return nil
}
