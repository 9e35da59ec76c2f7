package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/consumer"
)

// calls records the latency of AcquireTasks calls that returned tasks, in order.
type calls struct {
	mu  sync.Mutex
	at  []time.Time
	lat []time.Duration
}

func (c *calls) add(at time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, at)
	c.lat = append(c.lat, d)
}

// window returns the latencies of calls made in [from, to).
func (c *calls) window(from, to time.Time) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for i, at := range c.at {
		if !at.Before(from) && at.Before(to) {
			out = append(out, c.lat[i])
		}
	}
	return out
}

// drain runs consumers loops of AcquireTasks(batch) + AckTasks on queue, each loop with a
// Consumer of its own as separate processes would have, until total tasks were delivered
// or limit passed. An empty poll waits 10 ms.
func drain(ctx context.Context, s *gocql.Session, queue string, consumers, batch, total int,
	tr *tracker, cl *calls, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for range consumers {
		c, err := consumer.New(s, consumer.Config{Queue: queue})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tr.delivered.Load() < int64(total) && ctx.Err() == nil {
				t0 := time.Now()
				got, err := c.AcquireTasks(ctx, batch)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				now := time.Now()
				if len(got) == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if cl != nil {
					cl.add(t0, now.Sub(t0))
				}
				for _, t := range got {
					tr.record(t.ID, now.Sub(t.DueAt))
				}
				if err := c.AckTasks(ctx, got...); err != nil {
					errs <- err
					return
				}
				tr.acked(time.Now())
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if n := tr.delivered.Load(); n < int64(total) {
		return fmt.Errorf("only %d of %d tasks delivered within %v", n, total, limit)
	}
	return nil
}
