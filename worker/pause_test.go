package worker_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

const (
	pauseKeyspaceEnv = "SHARDQ_TEST_PAUSE_WORKER_KEYSPACE"
	pauseQueueEnv    = "SHARDQ_TEST_PAUSE_WORKER_QUEUE"
)

// TestPauseWorkerProcess is a worker process of TestPauseUnderLoad: a default worker
// whose handlers take 20 ms and print "ran <task ID> <lease start, Unix ns>" as each
// ends. It stops when its standard input closes. Run on its own it returns at once.
func TestPauseWorkerProcess(t *testing.T) {
	ks := os.Getenv(pauseKeyspaceEnv)
	if ks == "" {
		return
	}
	var mu sync.Mutex
	w, err := worker.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), worker.Config{Queue: os.Getenv(pauseQueueEnv),
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			time.Sleep(20 * time.Millisecond) // in flight while the pause begins
			mu.Lock()
			defer mu.Unlock()
			fmt.Println("ran", task.ID, task.Deadline.Add(-task.Timeout).UnixNano(), task.Deadline.UnixNano())
			return nil
		}),
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if a, ok := ev.(shardqtype.Acked); ok {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range a.TaskIDs {
					fmt.Println("acked", id)
				}
			}
		})})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	mu.Lock()
	fmt.Println("ready")
	mu.Unlock()
	_, _ = io.Copy(io.Discard, os.Stdin)
	require.NoError(t, w.Stop(ctx))
}

// A queue paused under a steady load, drained by two worker processes: no task is leased
// from SettingsRefresh after PauseQueue returned (and the fetch then under way) until
// ResumeQueue, though tasks keep coming due; the tasks in flight finish; after the resume
// every task scheduled runs, once.
func TestPauseUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 4})
	kids := spawn(t, "TestPauseWorkerProcess", 2, pauseKeyspaceEnv+"="+e.ks, pauseQueueEnv+"="+e.q.Name)

	// A producer schedules 20 tasks due now every 50 ms (400 a second) until told to stop.
	type scheduled struct {
		id uuid.UUID
		at time.Time // when the call returned
	}
	var mu sync.Mutex
	var all []scheduled
	stopProducing := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopProducing:
				return
			case <-tick.C:
			}
			tasks := make([]producer.Task, 20)
			for i := range tasks {
				tasks[i] = producer.Task{Queue: e.q.Name}
			}
			// A write not confirmed is scheduled again; the first try's task may run too.
			ids, _, err := scheduleAgain(context.Background(), e.p, tasks)
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			for _, id := range ids {
				all = append(all, scheduled{id, time.Now()})
			}
			mu.Unlock()
		}
	}()

	type lease struct{ start, deadline time.Time }
	runs := map[string]int{}
	acks := map[string]int{}
	leases := map[string][]lease{}
	collect := func(until func() bool, within time.Duration, what string) {
		t.Helper()
		deadline := time.After(within)
		for !until() {
			select {
			case f := <-kids.lines:
				if len(f) == 2 && f[0] == "acked" {
					acks[f[1]]++
				}
				if len(f) != 4 || f[0] != "ran" {
					continue
				}
				var start, end int64
				_, err := fmt.Sscan(f[2], &start)
				require.NoError(t, err)
				_, err = fmt.Sscan(f[3], &end)
				require.NoError(t, err)
				runs[f[1]]++
				leases[f[1]] = append(leases[f[1]], lease{time.Unix(0, start), time.Unix(0, end)})
			case <-time.After(50 * time.Millisecond): // until may hold by the time alone
			case <-deadline:
				require.FailNow(t, what)
			}
		}
	}
	collect(func() bool { return len(runs) >= 500 }, 60*time.Second, "500 tasks did not run under load in 60s")

	ctx := context.Background()
	require.NoError(t, shardq.PauseQueue(ctx, cassandratest.Driver(e.s), e.q.Name))
	paused := time.Now()
	// From here, a lease can only come from a fetch that read the queue as running: one
	// that began within SettingsRefresh of the pause (a second more for it to end).
	bound := paused.Add(shardqtype.SettingsRefresh + time.Second)
	// The pause lasts 3 s past the bound and until 400 tasks have come due past it: a
	// producer slowed by a busy node takes longer to schedule them.
	resumeAt := bound.Add(3 * time.Second)
	dueWhilePaused := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range all {
			if s.at.After(bound) {
				n++
			}
		}
		return n
	}
	collect(func() bool { return !time.Now().Before(resumeAt) && dueWhilePaused() >= 400 }, time.Minute,
		"400 tasks did not come due while paused within a minute")
	require.NoError(t, shardq.ResumeQueue(ctx, cassandratest.Driver(e.s), e.q.Name))
	resumed := time.Now()
	close(stopProducing)
	<-produced

	mu.Lock()
	defer mu.Unlock()
	duringPause := 0
	for _, s := range all {
		if s.at.After(bound) && s.at.Before(resumed) {
			duringPause++
		}
	}
	require.GreaterOrEqual(t, duringPause, 400, "tasks came due while the queue was paused")
	notRun := func() int {
		n := 0
		for _, s := range all {
			if runs[s.id.String()] == 0 {
				n++
			}
		}
		return n
	}
	// The backlog drains at whatever pace the machine allows; a minute without a task run
	// fails the test.
	for left := notRun(); left > 0; left = notRun() {
		collect(func() bool { return notRun() < left }, time.Minute,
			fmt.Sprintf("no task ran for a minute after the resume: %d of %d had not run", left, len(all)))
	}
	var late []string
	for id, ls := range leases {
		for _, l := range ls {
			if l.start.After(bound) && l.start.Before(resumed) {
				late = append(late, fmt.Sprintf("%s leased %v after the pause", id, l.start.Sub(paused)))
			}
		}
	}
	require.Empty(t, late, "leased while paused, past the bound")
	// A task runs once, or again only after a run whose ack did not apply (a timeout on
	// a busy node), once that run's lease had ended.
	for _, s := range all {
		id := s.id.String()
		require.Positive(t, runs[id], "task %s ran", id)
		if runs[id] == 1 {
			continue
		}
		require.Less(t, acks[id], runs[id], "task %s ran %d times, acked each time", id, runs[id])
		ls := leases[id]
		slices.SortFunc(ls, func(a, b lease) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ls); i++ {
			require.False(t, ls[i].start.Before(ls[i-1].deadline), "task %s leased again at %v, while its lease to %v lasted",
				id, ls[i].start, ls[i-1].deadline)
		}
	}
	t.Logf("%d tasks; %d scheduled while paused; paused %v, resumed after %v", len(all), duringPause, paused.Format(time.StampMilli), resumed.Sub(paused))
	kids.stop()
}

// assertNoError reports err from a goroutine other than the test's, which may not call
// FailNow.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("scheduling: %v", err)
		return false
	}
	return true
}
