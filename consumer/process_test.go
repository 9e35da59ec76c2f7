package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

const (
	helperKeyspaceEnv = "SHARDQ_TEST_HELPER_KEYSPACE"
	helperQueue       = "multi"
)

// drain runs consumers goroutines that take and ack tasks until stop closes, and calls
// acked with the IDs of each batch once its ack succeeded.
func drain(t testing.TB, c *consumer.Consumer, consumers int, stop <-chan struct{}, acked func([]uuid.UUID)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := c.AcquireTasks(ctx, 100)
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if len(got) == 0 {
					select { // an empty queue: poll again shortly
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				if err := c.AckTasks(ctx, got...); err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				acked(ids(got))
			}
		}()
	}
	return &wg
}

// TestHelperProcess is the second OS process of TestConcurrentProcesses: four consumers
// that print each acked task's ID and stop when their standard input closes. Run on its
// own, without the parent's environment, it has nothing to do and returns.
func TestHelperProcess(t *testing.T) {
	ks := os.Getenv(helperKeyspaceEnv)
	if ks == "" {
		return
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	c, err := consumer.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), consumer.Config{Queue: helperQueue,
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if f, ok := ev.(shardqtype.PartitionFailed); ok && errors.Is(f.Err, consumer.ErrOutcomeUnknown) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintln(out, "UNSETTLED", f.PartitionKey, f.Err)
				out.Flush()
			}
		})})
	require.NoError(t, err)
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	drain(t, c, 4, stop, func(batch []uuid.UUID) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range batch {
			fmt.Fprintln(out, "ID", id)
		}
		out.Flush()
	}).Wait()
}

// TestConcurrentProcesses drains 20,000 tasks (2,000 at RF 3, where three nodes share the
// machine and 20,000 took 230 s, 5,000 177 s; the two processes still contend for every
// partition)
// with 8 consumers in two OS processes, with timeouts long enough never to expire: every task is delivered exactly once, unless a
// swap's outcome stayed unknown (a timeout on a busy node, reading back timed out too):
// its markers stay and its rows may too, and a duplicate is the promised outcome then.
func TestConcurrentProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: helperQueue, ShardCount: 8,
		BucketCount: 60, BucketDuration: time.Second, DefaultTimeout: 50 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	total := 20_000
	if cassandratest.RF(t) > 1 {
		total = 2_000
	}
	want := map[uuid.UUID]bool{}
	for range total / 1000 {
		batch := make([]producer.Task, 1000)
		for i := range batch {
			batch[i] = producer.Task{Queue: q.Name, Payload: []byte("work"), Priority: i % 10}
		}
		got, err := p.ScheduleTasks(ctx, batch)
		require.NoError(t, err)
		for _, id := range got {
			want[id] = true
		}
	}
	require.Len(t, want, total)

	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	perProcess := map[string]int{}
	var unsettled atomic.Int64 // swaps whose outcome stayed unknown, in either process
	done := make(chan struct{})
	record := func(proc string, batch []uuid.UUID) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range batch {
			seen[id]++
		}
		perProcess[proc] += len(batch)
		if len(seen) == total {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}

	child := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	child.Env = append(os.Environ(), helperKeyspaceEnv+"="+ks,
		cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(t), ","))
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	readDone := make(chan struct{})
	var childOut []string
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "ID "); ok {
				record("child", []uuid.UUID{uuid.MustParse(id)})
			} else if strings.HasPrefix(line, "UNSETTLED ") {
				unsettled.Add(1)
				t.Log("child:", line)
			} else {
				childOut = append(childOut, line)
			}
		}
	}()

	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name,
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if f, ok := ev.(shardqtype.PartitionFailed); ok && errors.Is(f.Err, consumer.ErrOutcomeUnknown) {
				unsettled.Add(1)
				t.Logf("parent: unsettled in %s: %v", f.PartitionKey, f.Err)
			}
		})})
	require.NoError(t, err)
	stop := make(chan struct{})
	wg := drain(t, c, 4, stop, func(batch []uuid.UUID) { record("parent", batch) })

	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Errorf("drain did not finish: %d of %d seen", len(seen), total)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, stdin.Close())
	<-readDone
	require.NoError(t, child.Wait(), "child output: %s", strings.Join(childOut, "\n"))

	mu.Lock()
	defer mu.Unlock()
	t.Logf("delivered by process: %v", perProcess)
	require.Len(t, seen, total, "lost tasks")
	twice := 0
	for id, n := range seen {
		require.True(t, want[id], "unknown task %s", id)
		if n > 1 && unsettled.Load() > 0 {
			twice++
			continue
		}
		require.Equal(t, 1, n, "task %s delivered %d times", id, n)
	}
	t.Logf("%d swaps unsettled, %d tasks delivered again", unsettled.Load(), twice)
	require.Positive(t, perProcess["child"])
	require.Positive(t, perProcess["parent"])
	require.Zero(t, cassandratest.CountTaskRows(t, s, q.Layout()), "every acked lease is gone")
}
