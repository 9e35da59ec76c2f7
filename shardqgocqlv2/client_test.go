package shardqgocqlv2_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// A partition's lock, whose every write is a lightweight transaction, is held by one
// holder at a time across sessions, and passes on once released.
func TestLock(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	ctx := t.Context()
	first, err := lock.New(shardqgocqlv2.New(sessionOn(t, ks)), lock.Config{})
	require.NoError(t, err)
	second, err := lock.New(shardqgocqlv2.New(sessionOn(t, ks)), lock.Config{})
	require.NoError(t, err)

	// The first token is 1, or 2 when a busy node let the first take time out: settling
	// it moves the token past any straggler of it.
	held, err := first.Acquire(ctx, "q:0:0")
	require.NoError(t, err)
	require.Contains(t, []int64{1, 2}, held.Token())
	_, err = second.Acquire(ctx, "q:0:0")
	require.ErrorIs(t, err, lock.ErrLockHeld)
	still, err := held.Held(ctx)
	require.NoError(t, err)
	require.True(t, still)
	require.NoError(t, held.Release(ctx))

	again, err := second.Acquire(ctx, "q:0:0")
	require.NoError(t, err)
	require.Greater(t, again.Token(), held.Token(), "a new holder gets a greater token")
	require.NoError(t, again.Release(ctx))
}

// Tasks due now are taken, each once, through the take's lock, read, markers and swap,
// and acked; nothing is left to take after.
func TestTake(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ctx := t.Context()
	q := createQueue(t, d, shardq.QueueConfig{Name: "take", ShardCount: 1})
	p, err := producer.New(d, producer.Config{})
	require.NoError(t, err)
	tasks := make([]producer.Task, 50)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: q.Name, Payload: fmt.Appendf(nil, "%d", i)}
	}
	ids, err := p.ScheduleTasks(ctx, tasks)
	require.NoError(t, err)
	c, err := consumer.New(d, consumer.Config{Queue: q.Name})
	require.NoError(t, err)

	got := takeUntil(t, c, len(ids), 30*time.Second)
	delivered := map[uuid.UUID]int{}
	for _, task := range got {
		delivered[task.ID]++
	}
	require.Len(t, got, len(ids), "each task once")
	require.Len(t, delivered, len(ids))
	for _, id := range ids {
		require.Equal(t, 1, delivered[id], "task %s", id)
	}
	require.NoError(t, c.AckTasks(ctx, got...))
	more, err := c.AcquireTasks(ctx, len(ids))
	require.NoError(t, err)
	require.Empty(t, more)
}

// createQueue creates a queue, again when its lightweight transaction timed out: a node
// shared with other test processes has been that slow, and CreateQueue then reports
// what it read back, nothing stored, as a caller at start would see and retry.
func createQueue(t *testing.T, d *shardq.Driver, cfg shardq.QueueConfig) shardq.QueueConfig {
	t.Helper()
	for tries := 1; ; tries++ {
		q, err := shardq.CreateQueue(t.Context(), d, cfg)
		if err != nil && tries < 3 && driver.TimedOut(err) {
			t.Logf("creating the queue again after: %v", err)
			continue
		}
		require.NoError(t, err)
		return q
	}
}

// takeUntil takes tasks from c until n have come, within within. A call that fails is
// made again at the next tick, as a worker would.
func takeUntil(t *testing.T, c *consumer.Consumer, n int, within time.Duration) []*consumer.Task {
	t.Helper()
	var got []*consumer.Task
	require.EventuallyWithT(t, func(collect *assert.CollectT) {
		more, err := c.AcquireTasks(t.Context(), n)
		got = append(got, more...)
		assert.NoError(collect, err)
		assert.GreaterOrEqual(collect, len(got), n)
	}, within, 50*time.Millisecond)
	return got
}

// A task whose lease is not acked is delivered again once its timeout passes, and the
// first delivery's ack then fails.
func TestLeaseComesBack(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ctx := t.Context()
	q := createQueue(t, d, shardq.QueueConfig{Name: "lease", ShardCount: 1, DefaultTimeout: 2 * time.Second})
	p, err := producer.New(d, producer.Config{})
	require.NoError(t, err)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name})
	require.NoError(t, err)
	c, err := consumer.New(d, consumer.Config{Queue: q.Name})
	require.NoError(t, err)

	first := takeUntil(t, c, 1, 30*time.Second)
	require.Len(t, first, 1)
	require.Equal(t, id, first[0].ID)
	require.Equal(t, 1, first[0].Attempt)
	second := takeUntil(t, c, 1, 30*time.Second)
	require.Len(t, second, 1)
	require.Equal(t, id, second[0].ID)
	require.Equal(t, 2, second[0].Attempt)
	require.ErrorIs(t, c.AckTasks(ctx, first...), consumer.ErrLeaseLost)
	require.NoError(t, c.AckTasks(ctx, second...))
}

// pingArgs is a kind of task for TestClient.
type pingArgs struct {
	N int `json:"n"`
}

func (pingArgs) Kind() string { return "ping" }

// A client on a v2 driver creates its queue, runs an inserted task of a typed kind, and
// stops.
func TestClient(t *testing.T) {
	t.Parallel()
	d := newDriver(t)
	ran := make(chan int, 10) // buffered: a handler never waits on the test, even when run again
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(_ context.Context, task *shardq.Task[pingArgs]) error {
		ran <- task.Args.N
		return nil
	})
	client, err := shardq.NewClient(d, shardq.Config{Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}, Workers: workers})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, client.Start(ctx))
	_, err = client.Insert(ctx, pingArgs{N: 7}, nil)
	require.NoError(t, err)
	select {
	case n := <-ran:
		require.Equal(t, 7, n)
	case <-time.After(time.Minute):
		t.Fatal("the task did not run within a minute")
	}
	stop, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, client.Stop(stop))
}
