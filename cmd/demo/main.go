// Command demo schedules 10,000 tasks due over the next 10 seconds with mixed priorities,
// drains them with 4 consumers, and prints throughput, lateness and lost/duplicate
// counts. `make demo` runs it against a local node (starting one if none answers).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/producer"
)

func main() {
	hosts := flag.String("hosts", "127.0.0.1", "comma-separated Cassandra hosts ("+cqlcluster.HostsEnv+" wins when set)")
	keyspace := flag.String("keyspace", "shardq_demo", "keyspace to (re)create for the demo")
	tasks := flag.Int("tasks", 10_000, "tasks to schedule")
	spread := flag.Duration("spread", 10*time.Second, "due times spread uniformly over this long")
	consumers := flag.Int("consumers", 4, "consumers draining the queue")
	batch := flag.Int("batch", 100, "tasks per AcquireTasks call")
	flag.Parse()
	if err := run(*hosts, *keyspace, *tasks, *spread, *consumers, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(hostList, keyspace string, total int, spread time.Duration, consumers, batch int) error {
	ctx := context.Background()
	hosts := cqlcluster.EnvHosts()
	if len(hosts) == 0 {
		hosts = strings.Split(hostList, ",")
	}
	admin, err := cqlcluster.New(hosts...).CreateSession()
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", hosts, err)
	}
	defer admin.Close()
	for _, stmt := range []string{
		"DROP KEYSPACE IF EXISTS " + keyspace,
		"CREATE KEYSPACE " + keyspace + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
	} {
		if err := admin.Query(stmt).Exec(); err != nil {
			return err
		}
	}
	cluster := cqlcluster.New(hosts...)
	cluster.Keyspace = keyspace
	s, err := cluster.CreateSession()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := shardq.ApplySchema(ctx, s); err != nil {
		return err
	}
	q, err := shardq.CreateQueue(ctx, s, shardq.QueueConfig{Name: "demo", BucketCount: 60,
		BucketDuration: time.Second, ShardCount: 8, DefaultTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	fmt.Printf("queue %q: %d buckets x %v, %d shards; %d tasks due over %v, %d consumers\n",
		q.Name, q.BucketCount, q.BucketDuration, q.ShardCount, total, spread, consumers)

	// Consumers start first, as they would in production, and poll until every task came.
	c, err := consumer.New(s, consumer.Config{Queue: q.Name})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	seen := make(map[uuid.UUID]int, total)
	var lateness []time.Duration
	var lastAck time.Time
	done := make(chan struct{})
	var wg sync.WaitGroup
	var drainErr error
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := c.AcquireTasks(ctx, batch)
				delivered := time.Now()
				if err == nil && len(got) > 0 {
					err = c.AckTasks(ctx, got...)
				}
				if err != nil {
					mu.Lock()
					drainErr = err
					mu.Unlock()
					return
				}
				if len(got) == 0 {
					time.Sleep(20 * time.Millisecond) // the worker runtime does smarter polling
					continue
				}
				now := time.Now()
				mu.Lock()
				for _, task := range got {
					seen[task.ID]++
					lateness = append(lateness, delivered.Sub(task.DueAt))
				}
				lastAck = now
				if len(seen) == total {
					close(done)
				}
				mu.Unlock()
			}
		}()
	}

	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return err
	}
	// Due times begin a second on, so that scheduling is under way before the first is due;
	// with -spread 0 every task is due at once and the drain rate is the queue's capacity.
	start := time.Now().Add(time.Second)
	tasks := make([]producer.Task, total)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: q.Name, Payload: []byte("demo"), Priority: rand.IntN(10),
			DueAt: start.Add(time.Duration(rand.Int64N(int64(spread) + 1)))}
	}
	t0 := time.Now()
	var scheduled []uuid.UUID
	for chunk := range slices.Chunk(tasks, 1000) {
		ids, err := p.ScheduleTasks(ctx, chunk)
		if err != nil {
			return err
		}
		scheduled = append(scheduled, ids...)
	}
	scheduleTime := time.Since(t0)

	select {
	case <-done:
	case <-time.After(spread + 2*time.Minute):
	}
	mu.Lock()
	if len(seen) < total {
		close(done)
	}
	mu.Unlock()
	wg.Wait()
	if drainErr != nil {
		return drainErr
	}

	lost, dups := 0, 0
	for _, id := range scheduled {
		switch n := seen[id]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		}
	}
	slices.Sort(lateness)
	pct := func(p float64) time.Duration {
		return lateness[int(p*float64(len(lateness)-1))].Round(time.Millisecond)
	}
	fmt.Printf("scheduled %d tasks in %v: %.0f tasks/s\n", total, scheduleTime.Round(time.Millisecond), float64(total)/scheduleTime.Seconds())
	fmt.Printf("drained and acked %d tasks by %v after the first due time: %.0f tasks/s\n",
		len(seen), lastAck.Sub(start).Round(time.Millisecond), float64(len(seen))/lastAck.Sub(start).Seconds())
	fmt.Printf("lateness (delivery - due time): p50 %v, p99 %v, max %v\n", pct(0.5), pct(0.99), pct(1))
	fmt.Printf("lost %d, duplicates %d\n", lost, dups)
	if lost > 0 || dups > 0 {
		return fmt.Errorf("%d lost, %d duplicated", lost, dups)
	}
	return nil
}
