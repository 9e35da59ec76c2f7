package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

const (
	layoutKeyspaceEnv = "SHARDQ_TEST_LAYOUT_WORKER_KEYSPACE"
	layoutQueueEnv    = "SHARDQ_TEST_LAYOUT_WORKER_QUEUE"
)

// TestLayoutWorkerProcess is a worker process of TestChangeLayoutUnderLoad: a worker on a
// testclock.Shifted clock that prints "ran <task ID> <attempt> <lease start> <due>"
// (times in Unix ns of its clock) for each task, moves its clock by n ns on "shift <n>"
// and says "shifted", and stops when its standard input closes. Run on its own it returns
// at once.
func TestLayoutWorkerProcess(t *testing.T) {
	ks := os.Getenv(layoutKeyspaceEnv)
	if ks == "" {
		return
	}
	var out printer
	clock := testclock.NewShifted(0) // the processes of TestChangeLayoutUnderLoad move it together
	w, err := worker.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), worker.Config{Queue: os.Getenv(layoutQueueEnv), Clock: clock,
		MaxIdleInterval: 2 * time.Second, Concurrency: 64,
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			out.println("ran", task.ID, task.Attempt, task.Deadline.Add(-task.Timeout).UnixNano(), task.DueAt.UnixNano())
			return nil
		})})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	out.println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "shift" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			clock.Add(time.Duration(n))
			out.println("shifted")
		}
	}
	require.NoError(t, w.Stop(ctx))
}

// Due times are whole milliseconds, as stored: a row's ID keeps 100 ns, so a task due
// between two 100 ns ticks may start a few ns before the time asked for.
//
// A queue's layout changes twice under load, 8 -> 16 -> 2 shards and 10 s ->
// 1 s buckets, while a producer schedules 100,000 tasks (20,000 at replication factor 3
// or under the race detector) due over two minutes (half written before the changes,
// half as they come due) plus
// tasks due in the next lap and next week, and two worker processes run them. No task is
// lost, none starts before it is due, each far-future one starts at its time once the
// clocks are moved there, a task runs twice only when a lease expired (its later run
// is a later attempt), and every ring is empty at the end: each task's last run acked. A write not confirmed on a busy node is scheduled again, as a
// service would; its first copy may run too.
func TestChangeLayoutUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 8, BucketCount: 60, BucketDuration: 10 * time.Second})
	clock := testclock.NewShifted(0)
	p, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: clock})
	require.NoError(t, err)
	kids := spawn(t, "TestLayoutWorkerProcess", 2, layoutKeyspaceEnv+"="+e.ks, layoutQueueEnv+"="+e.q.Name)
	ctx := context.Background()

	const span = 2 * time.Minute
	total := 100_000
	if cassandratest.RF(t) > 1 || cassandratest.RaceDetector {
		// Three replicas on one small machine write every task three times: beside another
		// package's tests, 40,000 took 3m42s to schedule and 10,874 had not run two
		// minutes later. Race-instrumented workers beside the other packages' tests ran
		// 71,400 of 100,200 tasks in five minutes, and 40,000 took 282 s, the longest test
		// of the suite. 20,000 keep the changes under load (170 tasks a second) without a
		// cluster or workers past their capacity.
		total = 20_000
	}
	var mu sync.Mutex
	due := map[uuid.UUID]time.Time{} // every task scheduled, and when it is due
	// Tasks whose write was not confirmed on a busy node, scheduled again under new IDs:
	// each may run too, never before it is due, but need not.
	unsure := map[uuid.UUID]time.Time{}
	schedule := func(tasks []producer.Task) {
		ids, notConfirmed, err := scheduleAgain(ctx, p, tasks)
		mu.Lock()
		defer mu.Unlock()
		for id, i := range notConfirmed {
			unsure[id] = tasks[i].DueAt
		}
		if !assertNoError(t, err) {
			return
		}
		for i, id := range ids {
			due[id] = tasks[i].DueAt
		}
	}
	start := time.Now()
	lap := e.q.Layout().Lap()
	nextLap, nextWeek := start.Add(lap+time.Minute).Truncate(time.Millisecond), start.Add(7*24*time.Hour).Truncate(time.Millisecond)
	var far []producer.Task
	for i := range 200 {
		at := nextLap
		if i%2 == 1 {
			at = nextWeek
		}
		far = append(far, producer.Task{Queue: e.q.Name, DueAt: at.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	schedule(far)
	// Half up front, due over the span from 5 s on, written under the first layout.
	upfront := make([]producer.Task, total/2)
	for i := range upfront {
		upfront[i] = producer.Task{Queue: e.q.Name, DueAt: start.Add(5*time.Second + time.Duration(rand.Int64N(int64(span)))).Truncate(time.Millisecond)}
	}
	var writers sync.WaitGroup
	for i := 0; i < len(upfront); i += 500 {
		writers.Go(func() { schedule(upfront[i : i+500]) })
		if i%4000 == 0 {
			writers.Wait()
		}
	}
	writers.Wait()
	// The other half as the span goes, each due within 5 s of its write, under whichever
	// layout is in force.
	produced, stop := make(chan struct{}), make(chan struct{})
	// A test that fails stops the writes before it ends: a write's failure reported
	// after that would panic.
	t.Cleanup(func() {
		close(stop)
		<-produced
	})
	go func() {
		defer close(produced)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		per := total / 2 / int(span/(50*time.Millisecond))
		for sent := 0; sent < total/2; sent += per {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
			tasks := make([]producer.Task, min(per, total/2-sent))
			for i := range tasks {
				tasks[i] = producer.Task{Queue: e.q.Name, DueAt: clock.Now().Add(time.Duration(rand.Int64N(int64(5 * time.Second)))).Truncate(time.Millisecond)}
			}
			schedule(tasks)
		}
	}()

	runs := map[uuid.UUID][]run{}
	in, err := inspect.New(cassandratest.Driver(e.s), inspect.Config{})
	require.NoError(t, err)
	// missing says which tasks due before at have not run, and where a few of them are.
	missing := func(before time.Time) string {
		mu.Lock()
		defer mu.Unlock()
		var ids []uuid.UUID
		for id, at := range due {
			if at.Before(before) && len(runs[id]) == 0 {
				ids = append(ids, id)
			}
		}
		out := fmt.Sprintf("%d of %d have not run", len(ids), len(due))
		for _, id := range ids[:min(8, len(ids))] {
			info, err := in.Task(ctx, id)
			if err != nil {
				out += fmt.Sprintf("\n  %s due %v: %v", id, due[id].Sub(start), err)
				continue
			}
			out += fmt.Sprintf("\n  %s due %v: %v in %s, visible at %v, attempt %d", id, due[id].Sub(start), info.State, info.PartitionKey,
				info.VisibleAt.Sub(start), info.Attempt)
		}
		return out
	}
	collect := func(until func() bool, within time.Duration, what string) {
		t.Helper()
		deadline := time.After(within)
		for !until() {
			// Lines for a while between looks: until may read every task.
			for look := time.After(250 * time.Millisecond); ; {
				select {
				case f := <-kids.lines:
					if len(f) == 5 && f[0] == "ran" {
						runs[uuid.MustParse(f[1])] = append(runs[uuid.MustParse(f[1])], parseRun(t, f))
					}
					continue
				case <-look:
				case <-deadline:
					require.FailNow(t, what, "%s", missing(time.Now().Add(time.Hour)))
				}
				break
			}
		}
	}
	change := func(cfg shardqtype.LayoutConfig) shardqtype.LayoutChange {
		ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(e.s), e.q.Name, cfg)
		// A change that timed out on a busy node and read back as not stored is asked
		// again, as an operator would; one of unknown outcome is not.
		for tries := 1; tries < 5 && gocqlv1.TimedOut(err) && !errors.Is(err, consumer.ErrOutcomeUnknown); tries++ {
			t.Logf("changing the layout again after: %v", err)
			ch, err = shardq.ChangeLayout(ctx, cassandratest.Driver(e.s), e.q.Name, cfg)
		}
		require.NoError(t, err)
		t.Logf("layout %d (%+v) from %v", ch.Generation, cfg, ch.From.Sub(start))
		collect(func() bool { return time.Now().After(ch.From.Add(time.Second)) }, time.Minute, "the change did not take effect in a minute")
		return ch
	}
	collect(func() bool { return time.Since(start) > 10*time.Second }, time.Minute, "")
	change(shardqtype.LayoutConfig{ShardCount: 16})
	ch := change(shardqtype.LayoutConfig{ShardCount: 2, BucketDuration: time.Second})
	<-produced
	mu.Lock()
	require.Len(t, due, total+len(far))
	mu.Unlock()
	ranDue := func(before time.Time) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id, at := range due {
				if at.Before(before) && len(runs[id]) == 0 {
					return false
				}
			}
			return true
		}
	}
	t.Logf("scheduling done at %v", time.Since(start))
	collect(ranDue(nextLap), 2*time.Minute, "not every task due over the span ran")

	// Move every clock to just before the far tasks come due, and let them.
	for _, at := range []time.Time{nextLap, nextWeek} {
		shift := at.Add(-5 * time.Second).Sub(clock.Now())
		clock.Add(shift)
		kids.tell(fmt.Sprint("shift ", int64(shift)))
		collect(ranDue(at.Add(time.Hour)), time.Minute, fmt.Sprintf("the tasks due at %v did not run within a minute of it", at))
	}

	early, twice, lateFar := 0, 0, 0
	for id, at := range due {
		rs := runs[id]
		require.NotEmpty(t, rs, "task %s due %v is lost", id, at)
		for i, r := range rs {
			if r.leased.Before(at) {
				early++
				t.Errorf("task %s due %v leased %v early", id, at, at.Sub(r.leased))
			}
			if i > 0 {
				twice++
				require.Greater(t, r.attempt, rs[0].attempt, "task %s ran twice in one attempt: a copy, not an expired lease", id)
			}
		}
		if !at.Before(nextLap) && rs[0].leased.Sub(at) > 15*time.Second {
			lateFar++
			t.Errorf("far task %s due %v ran %v late", id, at, rs[0].leased.Sub(at))
		}
	}
	for id, at := range unsure {
		for _, r := range runs[id] {
			if r.leased.Before(at) {
				early++
				t.Errorf("task %s (write not confirmed) due %v leased %v early", id, at, at.Sub(r.leased))
			}
		}
	}
	require.Zero(t, early)
	require.Zero(t, lateFar)
	layouts, err := shardq.QueueLayouts(ctx, cassandratest.Driver(e.s), e.q.Name)
	require.NoError(t, err)
	require.Len(t, layouts, 3)
	require.Equal(t, ch.From, layouts[2].From)
	// A run is not an end: every task's last run was acked, and nothing of it (row,
	// marker, retry) is left in any ring, within a few ack intervals.
	for deadline := time.Now().Add(time.Minute); ; {
		left := 0
		for _, l := range layouts {
			left += cassandratest.CountTaskRows(t, e.s, l.Layout)
		}
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d task rows left in the queue's rings a minute after every task ran", left)
		time.Sleep(time.Second) // a poll of what the workers' acks leave
	}
	t.Logf("%d tasks ran, %d again after a lease expired, %d scheduled again after a write not confirmed; drained: %v %v",
		len(due), twice, len(unsure), layouts[0].Drained, layouts[1].Drained)
	kids.stop()
}

// run is one run of a task, as a worker process printed it.
type run struct {
	attempt int
	leased  time.Time
	due     time.Time
}

func parseRun(t *testing.T, f []string) run {
	attempt, err1 := strconv.Atoi(f[2])
	leased, err2 := strconv.ParseInt(f[3], 10, 64)
	dueAt, err3 := strconv.ParseInt(f[4], 10, 64)
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.NoError(t, err3)
	return run{attempt: attempt, leased: time.Unix(0, leased), due: time.Unix(0, dueAt)}
}
