package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/shardqtype"
)

// What -via names: the path a workload's tasks take.
const (
	viaWorker = "worker" // scheduled with producer.Producer, run by worker.Worker
	viaClient = "client" // inserted and run by a shardq.Client, as its users do
)

// benchArgs are the client's bench tasks. They encode to payload, so that both paths
// write, read and hand over the same bytes, and only the client's own work differs.
type benchArgs struct {
	User    int    `json:"user"`
	Action  string `json:"action"`
	Attempt int    `json:"attempt"`
}

func (benchArgs) Kind() string { return "bench" }

var args = benchArgs{User: 12345, Action: "send-welcome-email"}

// newClient returns a client on s serving queues, each with handlers handlers (0: the
// default) and every other setting at its default, that runs work on each bench task;
// obs gets its events.
func newClient(s *shardq.Driver, queues []string, handlers int, obs shardqtype.Observer,
	work func(t *shardq.Task[benchArgs])) (*shardq.Client, error) {
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, t *shardq.Task[benchArgs]) error {
		work(t)
		return nil
	})
	cfg := shardq.Config{Queues: make(map[string]shardq.Queue, len(queues)), Workers: workers, Observer: obs}
	for _, q := range queues {
		cfg.Queues[q] = shardq.Queue{Concurrency: handlers}
	}
	return shardq.NewClient(s, cfg)
}

// insertAll inserts n bench tasks with InsertMany, as scheduleAll schedules them: in calls
// of 1,000, priority i%10, due at due(i) (zero: now). It returns their IDs and how long it
// took.
func insertAll(ctx context.Context, c *shardq.Client, queue string, n int, due func(i int) time.Time) ([]uuid.UUID, time.Duration, error) {
	params := make([]shardq.InsertManyParams, n)
	for i := range params {
		params[i] = shardq.InsertManyParams{Args: args, Opts: &shardq.InsertOpts{Queue: queue, Priority: i % 10, DueAt: due(i)}}
	}
	ids := make([]uuid.UUID, 0, n)
	t0 := time.Now()
	for chunk := range slices.Chunk(params, 1000) {
		res, err := c.InsertMany(ctx, chunk)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids, time.Since(t0), nil
}

// waitPolled returns once the first polls of a client serving queues queues are over, as
// its requests (sent, a running count) tell, or ctx ends (nil both): a client does not
// say when its workers have polled, as a worker's Stats do. A starting client reads each
// queue's settings and the signal cells of its lap, and only the partitions those show
// written; an idle client then sends about 4.5 requests a second. Over is a whole second
// with fewer than idleQuiet requests per queue, after the first two.
func waitPolled(ctx context.Context, queues int, sent func() int64) error {
	const idleQuiet = 20
	limit := time.After(5 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ticks, last := 0, sent(); ; ticks++ {
		select {
		case <-ctx.Done():
			return nil
		case <-limit:
			return fmt.Errorf("the first polls of %d queues not over within 5m", queues)
		case <-tick.C:
		}
		n := sent()
		if ticks >= 1 && n-last < int64(idleQuiet*queues) {
			return nil
		}
		last = n
	}
}
