package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
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

// drained is what a drain did besides delivering: the bench's request count when every
// task had been delivered once, and what settling the queue took and left.
type drained struct {
	requests int64
	at       time.Time // when every task had been delivered once
	settled
}

// drain runs consumers loops of AcquireTasks(batch) + AckTasks on q, each loop with a
// Consumer of its own as separate processes would have, until total tasks were delivered
// once (or limit passed), then keeps them consuming while settle makes sure the queue is
// drained, so that a task delivered again counts as a duplicate. An empty poll waits 10 ms.
func (b *bench) drain(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig, consumers, batch, total int,
	tr *tracker, cl *calls, limit time.Duration) (drained, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for range consumers {
		c, err := consumer.New(s, consumer.Config{Queue: q.Name})
		if err != nil {
			return drained{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := consume(ctx, c, batch, tr, cl, quit); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	stop := func() {
		close(quit)
		wg.Wait()
	}
	var d drained
	select {
	case <-tr.all:
	case err := <-errs:
		cancel()
		stop()
		return d, err
	case <-time.After(limit):
		cancel()
		stop()
		return d, fmt.Errorf("only %d of %d tasks delivered within %v", tr.delivered.Load(), total, limit)
	}
	d.requests, d.at = b.requests.Load(), time.Now()
	var err error
	d.settled, err = b.settle(ctx, s, q)
	stop()
	close(errs)
	if err == nil {
		err = <-errs
	}
	return d, err
}

// consume takes and acks batches until quit is closed: one of drain's loops.
func consume(ctx context.Context, c *consumer.Consumer, batch int, tr *tracker, cl *calls, quit <-chan struct{}) error {
	for {
		select {
		case <-quit:
			return nil
		default:
		}
		t0 := time.Now()
		got, err := c.AcquireTasks(ctx, batch)
		if err != nil {
			return err
		}
		now := time.Now()
		if len(got) == 0 {
			select {
			case <-quit:
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if cl != nil {
			cl.add(t0, now.Sub(t0))
		}
		first := false
		for _, t := range got {
			first = tr.record(t.ID, now.Sub(t.DueAt)) || first
		}
		if err := c.AckTasks(ctx, got...); err != nil {
			return err
		}
		if first {
			tr.acked(time.Now())
		}
	}
}

// settleGrace is how long after a row left in a queue becomes visible it is delivered
// again at the latest: by an idle worker's poll (every MaxIdleInterval; drain's loops poll
// every 10 ms), once past the clock skew consumers allow for.
const settleGrace = worker.DefaultMaxIdleInterval + consumer.DefaultMaxClockSkew

// settled is what settle found.
type settled struct {
	left []uuid.UUID   // tasks of rows still in the queue after settling
	took time.Duration // how long settling took
}

// settle runs once every task of a drain was delivered once, while the workload's
// consumers or worker keep consuming, and returns once the queue is verifiably drained:
// no task row (a pending task, or the timeout marker of one in flight) left in any of
// its partitions, read from the tasks table. Only then is a duplicate count worth
// anything: a row left behind (a marker an ack did not delete, a task a swap did not
// delete) is delivered again once visible, counted as a duplicate by the tracker, and
// its ack takes the row out. A marker of the last deliveries is visible by the queue's
// timeout at the latest, so settle waits that plus settleGrace for the queue to empty and
// then returns the tasks still there. Without a defect the table is empty at once (or
// after the last acks land): the phase costs a read of each partition, not a wait for
// leases to expire, and lease timeouts can stay longer than the drains.
func (b *bench) settle(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig) (settled, error) {
	start := time.Now()
	deadline := start.Add(q.DefaultTimeout + settleGrace)
	for said := false; ; {
		left, err := taskscan.TaskIDs(ctx, s, q, 16, taskscan.PageSize)
		if err != nil {
			return settled{}, fmt.Errorf("settling: %w", err)
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return settled{left: left, took: time.Since(start)}, nil
		}
		if !said && time.Since(start) > 2*time.Second { // not the last acks landing
			fmt.Fprintf(os.Stderr, "%s: %d task rows left in the queue once every task was delivered; consuming until %v\n",
				q.Name, len(left), deadline.Format(time.TimeOnly))
			said = true
		}
		select {
		case <-ctx.Done():
			return settled{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
