package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// offsetClock is a clock that trails (or leads) another by a fixed amount.
type offsetClock struct {
	c *testclock.Clock
	d time.Duration
}

func (o offsetClock) Now() time.Time { return o.c.Now().Add(o.d) }

// The read floors never hide a row: tasks due now, past due, a little ahead, written by
// a producer whose clock trails by 1.5 s, retried, and left to expire, over all
// priorities, are each delivered by the first drain after they become visible, never
// before, until every one is acked.
func TestFloorsHideNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 2, BucketCount: 30, BucketDuration: time.Second})
	trailing, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: offsetClock{e.clock, -1500 * time.Millisecond}})
	require.NoError(t, err)
	// A partition whose read timed out on an overloaded node is skipped by that call, which
	// the next call makes up for: a drain ends at an empty take only when no read timed
	// out during it. Any other partition failure fails the test.
	timedOut, observer := countTimeouts(t)
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock, Observer: observer})
	require.NoError(t, err)
	ctx := context.Background()

	type state struct {
		visible time.Time      // when it may be delivered next
		held    *consumer.Task // the lease we hold, if any
		done    bool
		// again: an ack or move of it timed out on a busy node, having applied, in part
		// or not at all, so a copy may be delivered after it is done (the README's
		// duplicate, never a loss), never before it is visible.
		again bool
	}
	// settled takes an ack's or a move's error: nil, or a timeout, which leaves st's task
	// liable to come again.
	settled := func(st *state, err error) {
		if gocqlv1.TimedOut(err) {
			t.Logf("may come again after: %v", err)
			st.again = true
			return
		}
		require.NoError(t, err)
	}
	model := map[uuid.UUID]*state{}
	rng := rand.New(rand.NewPCG(1, 2))
	tick := e.keepUp(250 * time.Millisecond)
	schedule := func(p *producer.Producer, pnow time.Time, due time.Time) {
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: e.q.Name, DueAt: due, Priority: rng.IntN(10)})
		require.NoError(t, err)
		vis := due
		if due.IsZero() || due.Before(pnow) {
			vis = pnow
		}
		model[id] = &state{visible: vis}
	}
	for step := range 80 {
		now := e.clock.Now()
		if step < 60 {
			schedule(e.p, now, time.Time{})
			schedule(trailing, now.Add(-1500*time.Millisecond), time.Time{})
			schedule(e.p, now, now.Add(-time.Duration(rng.IntN(5000))*time.Millisecond))
			schedule(trailing, now.Add(-1500*time.Millisecond), now.Add(-time.Duration(rng.IntN(3000))*time.Millisecond))
			schedule(e.p, now, now.Add(time.Duration(rng.IntN(3000))*time.Millisecond))
		}
		for retries := 0; ; {
			before := timedOut.Load()
			got, err := c.AcquireTasks(ctx, 7) // small batches: reads stop mid-priority
			require.NoError(t, err)
			if len(got) == 0 {
				if timedOut.Load() == before {
					break
				}
				retries++
				require.Less(t, retries, 20, "a partition read kept timing out")
				continue
			}
			for _, task := range got {
				st := model[task.ID]
				require.NotNil(t, st, "unknown task %s", task.ID)
				require.False(t, st.done && !st.again, "task %s delivered after its ack", task.ID)
				require.False(t, st.visible.After(now), "task %s delivered early: visible at %v, now %v", task.ID, st.visible, now)
				st.held = task
				switch r := rng.IntN(10); {
				case r < 6:
					settled(st, c.AckTasks(ctx, task))
					st.done, st.held = true, nil
				case r < 8:
					delay := time.Duration(rng.IntN(1500)) * time.Millisecond
					settled(st, c.Retry(ctx, task, delay))
					st.visible, st.held = now.Add(delay), nil
				default: // left to expire: visible again at its deadline
					st.visible = task.Deadline
				}
			}
		}
		for id, st := range model {
			if !st.done && !st.visible.After(now) {
				require.Failf(t, "task missed", "task %s visible since %v is not delivered at %v (held: %v)", id, st.visible, now, st.held != nil)
			}
		}
		tick()
	}
	e.clock.Add(10 * time.Second)
	for retries := 0; ; {
		before := timedOut.Load()
		got, err := c.AcquireTasks(ctx, 100)
		require.NoError(t, err)
		if len(got) == 0 {
			if timedOut.Load() == before {
				break
			}
			retries++
			require.Less(t, retries, 20, "a partition read kept timing out")
			continue
		}
		err = c.AckTasks(ctx, got...)
		for _, task := range got {
			st := model[task.ID]
			settled(st, err)
			st.done = true
		}
	}
	for id, st := range model {
		require.True(t, st.done, "task %s never acked", id)
	}
}

// countTimeouts returns an Observer that counts the partition reads that timed out (on an
// overloaded node) and fails t on any other partition failure, and the count.
func countTimeouts(t *testing.T) (*atomic.Int64, shardqtype.Observer) {
	var n atomic.Int64
	return &n, shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
		f, ok := ev.(shardqtype.PartitionFailed)
		switch {
		case !ok:
		case gocqlv1.TimedOut(f.Err):
			n.Add(1)
			t.Logf("partition %s timed out (%s): %v", f.PartitionKey, f.Op, f.Err)
		default:
			t.Errorf("partition %s failed (%s): %v", f.PartitionKey, f.Op, f.Err)
		}
	})
}

// A partition whose reads fail does not stop the others; its failure reaches the
// observer, and the call fails only when nothing could be read.
func TestFailingPartitionIsolated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 4, BucketCount: 10, BucketDuration: time.Second})
	// A producer that opens a shard per task: the 80 spread over all 4 shards at once.
	spreading, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: e.clock, ShardRate: 1})
	require.NoError(t, err)
	var tasks []producer.Task
	for range 80 {
		tasks = append(tasks, producer.Task{Queue: e.q.Name})
	}
	_, err = spreading.ScheduleTasks(context.Background(), tasks)
	require.NoError(t, err)
	var failures sync.Map
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock,
		Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
			if f, ok := ev.(shardqtype.PartitionFailed); ok {
				failures.Store(f.PartitionKey, f.Op)
			}
		})})
	require.NoError(t, err)
	broken := errors.New("test: partition unreadable")
	var bad sync.Map // the failing keys seen
	consumer.SetFailRead(c, func(key string) error {
		if strings.HasSuffix(key, ":0") { // concurrency shard 0, whatever the bucket
			bad.Store(key, true)
			return broken
		}
		return nil
	})
	ctx := context.Background()
	var got []*consumer.Task
	for {
		more, err := c.AcquireTasks(ctx, 50)
		require.NoError(t, err)
		if len(more) == 0 {
			break
		}
		got = append(got, more...)
	}
	require.NotEmpty(t, got)
	require.Less(t, len(got), 80, "shard 0 of 4 held none of 80 tasks")
	n := 0
	bad.Range(func(key, _ any) bool {
		n++
		op, ok := failures.Load(key)
		require.True(t, ok, "the failure of %s reached the observer", key)
		require.Equal(t, "peek", op)
		return true
	})
	require.Positive(t, n)

	consumer.SetFailRead(c, func(string) error { return broken })
	_, err = c.AcquireTasks(ctx, 50)
	require.ErrorIs(t, err, broken, "nothing could be read at all")

	consumer.SetFailRead(c, nil)
	rest := e.acquire(c, 100)
	require.Len(t, rest, 80-len(got))
	require.NoError(t, c.AckTasks(ctx, append(got, rest...)...))
}

// Tasks of 1 MiB are leased within Cassandra's mutation limits: 24 of them in one
// partition are all delivered.
func TestLargePayloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 10, BucketDuration: time.Second})
	p, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: e.clock, MaxPayloadBytes: producer.MaxPayloadLimit})
	require.NoError(t, err)
	ctx := context.Background()
	want := map[uuid.UUID]bool{}
	for i := range 24 {
		body := make([]byte, producer.MaxPayloadLimit)
		body[0] = byte(i)
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: e.q.Name, Payload: body})
		require.NoError(t, err)
		want[id] = true
	}
	c := e.consumer()
	got := map[uuid.UUID]bool{}
	// A take reads at most MaxTakeBytes (3 of these tasks), and a read of megabytes that
	// times out on a loaded node is skipped for that call (the consumer reports it to its
	// observer), so the calls needed vary: 8 at the least.
	for range 60 {
		tasks := e.acquire(c, 24)
		for _, task := range tasks {
			require.Len(t, task.Payload, producer.MaxPayloadLimit)
			got[task.ID] = true
		}
		require.NoError(t, c.AckTasks(ctx, tasks...))
		if len(got) == len(want) {
			break
		}
	}
	require.Equal(t, want, got)
}

// 150,000 tasks due at once in one partition drain completely, with the tombstone
// failure threshold at its default (100,000): no read ever walks the rows already
// consumed. With replicas on three nodes of one small machine, every write costs three,
// and 120,000 still go past the threshold.
func TestBacklogInOnePartition(t *testing.T) {
	if cassandratest.RaceDetector {
		// Its 150,000 writes and reads exercise Cassandra's tombstone handling, not this
		// process's concurrency; under the race detector they took over four minutes of
		// CI. make test runs it again without, on one node.
		t.Skip("runs without the race detector (make test)")
	}
	n := 150_000
	if cassandratest.RF(t) > 1 {
		n = 120_000
	}
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "backlog", ShardCount: 1})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	chunks := make(chan []producer.Task)
	var wg sync.WaitGroup
	// A batch that timed out on a busy node may have applied: it is written again, and
	// its tasks may then be delivered twice (as a producer's retry would make them).
	var mu sync.Mutex
	unsure := map[int]bool{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for chunk := range chunks {
				for len(chunk) > 0 {
					_, err := p.ScheduleTasks(ctx, chunk)
					var partial *producer.PartialError
					if !errors.As(err, &partial) {
						require.NoError(t, err)
						break
					}
					again := make([]producer.Task, 0, len(partial.Failed))
					mu.Lock()
					for _, i := range partial.Failed {
						again = append(again, chunk[i])
						var at int
						_, err := fmt.Sscan(string(chunk[i].Payload), &at)
						require.NoError(t, err)
						unsure[at] = true
					}
					mu.Unlock()
					chunk = again
				}
			}
		}()
	}
	for i := 0; i < n; i += 1000 {
		chunk := make([]producer.Task, 1000)
		for j := range chunk {
			chunk[j] = producer.Task{Queue: q.Name, Payload: []byte(fmt.Sprint(i + j))}
		}
		chunks <- chunk
	}
	close(chunks)
	wg.Wait()

	var failed atomic.Int64
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Observer: shardqtype.ObserverFunc(func(_ context.Context, ev shardqtype.Event) {
		// A read past the tombstone failure threshold fails on the replica; a timeout on a
		// node busy with other tests is tried again by the next call.
		if f, ok := ev.(shardqtype.PartitionFailed); ok && !gocqlv1.TimedOut(f.Err) {
			failed.Add(1)
			t.Errorf("partition %s failed (%s): %v", f.PartitionKey, f.Op, f.Err)
		}
	})})
	require.NoError(t, err)
	seen := make([]bool, n)
	delivered := 0
	deadline := time.Now().Add(10 * time.Minute)
	for delivered < n && time.Now().Before(deadline) && failed.Load() == 0 {
		got, err := c.AcquireTasks(ctx, consumer.MaxAcquire)
		if gocqlv1.TimedOut(err) {
			continue
		}
		require.NoError(t, err)
		idx := make([]int, len(got))
		for k, task := range got {
			i := &idx[k]
			_, err := fmt.Sscan(string(task.Payload), i)
			require.NoError(t, err)
			if !seen[*i] {
				delivered++
			} else {
				require.True(t, unsure[*i], "task %d delivered twice", *i)
			}
			seen[*i] = true
		}
		// An ack that timed out may not have applied: its tasks come back at their
		// deadlines.
		if err := c.AckTasks(ctx, got...); gocqlv1.TimedOut(err) {
			for _, i := range idx {
				unsure[i] = true
			}
		} else {
			require.NoError(t, err)
		}
	}
	require.Equal(t, n, delivered)
	require.Equal(t, -1, slices.Index(seen, false))
}

// A producer whose clock trails by 4 s, more than MaxClockSkew, writes rows below the
// consumers' floors, some into the bucket being read (whose signal cell on-time writes
// touch again before any sweep sees it) and some into buckets the cursors passed. Each of
// its tasks is still delivered within a sweep of its write (plus the polls of this test),
// not at its bucket's end, nor at an idle consumer's next full scan (a worker's look
// three idle intervals ahead makes those 15 s apart), nor when the ring comes back.
func TestLateWritesFoundBySweep(t *testing.T) {
	t.Parallel()
	for _, bucket := range []time.Duration{time.Second, 10 * time.Second} {
		t.Run(bucket.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 120, BucketDuration: bucket, DefaultTimeout: 30 * time.Second})
			trailing, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: offsetClock{e.clock, -4 * time.Second}})
			require.NoError(t, err)
			// As in TestFloorsHideNothing: a drain ends at an empty take only when no
			// partition read timed out during it; any other partition failure fails the test.
			timedOut, observer := countTimeouts(t)
			c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock, LookAhead: 30 * time.Second,
				Observer: observer})
			require.NoError(t, err)
			ctx := context.Background()
			written := map[uuid.UUID]time.Time{} // by the consumer's clock
			var waited time.Duration
			drain := func() {
				for retries := 0; ; {
					before := timedOut.Load()
					got, err := c.AcquireTasks(ctx, 100)
					require.NoError(t, err)
					if len(got) == 0 {
						if timedOut.Load() == before {
							return
						}
						retries++
						require.Less(t, retries, 20, "a partition read kept timing out")
						continue
					}
					require.NoError(t, c.AckTasks(ctx, got...))
					for _, task := range got {
						if at, ok := written[task.ID]; ok {
							waited = max(waited, e.clock.Now().Sub(at))
							delete(written, task.ID)
						}
					}
				}
			}
			longest, keepUp := time.Duration(0), e.keepUp(250*time.Millisecond)
			step := func() { longest = max(longest, keepUp()) }
			for range 40 {
				for _, p := range []*producer.Producer{trailing, e.p} { // on-time writes touch the cell last
					ids, err := p.ScheduleTasks(ctx, []producer.Task{{Queue: e.q.Name}, {Queue: e.q.Name}})
					require.NoError(t, err)
					for _, id := range ids {
						written[id] = e.clock.Now()
					}
				}
				drain()
				step()
			}
			for end := e.clock.Now().Add(2 * consumer.SweepInterval); len(written) > 0 && e.clock.Now().Before(end); {
				drain()
				step()
			}
			require.Empty(t, written, "%d late tasks not delivered in two sweeps (a lap is 120 buckets)", len(written))
			require.LessOrEqual(t, waited, consumer.SweepInterval+longest+750*time.Millisecond, "a late task waited past a sweep and a poll")
		})
	}
}

// A trailing producer's write made more than MaxClockSkew after a
// sweep. An idle consumer with a worker's look-ahead (30 s: a full scan once per 15 s),
// polled every 250 ms, reads a 10 s bucket, its floors MaxClockSkew behind its clock; a
// producer whose clock trails by 4 s writes a task into that bucket, below the floors.
// The next sweep finds it: the task is delivered within SweepInterval plus one poll of
// its write.
//   - 8.5 s after a sweep, with an on-time write into the bucket after it: sweeps that
//     flagged only rows older than the previous sweep less MaxClockSkew, on cells that kept
//     the last touch, left it to the read of the bucket before it is passed, which a full
//     scan just before the bucket's end (with no write into it since) put off by 15 s.
//   - 9 s into the bucket, with a full scan between the write and the next sweep: the
//     sweep lowered the floors, but an idle consumer reads between full scans only the
//     partitions whose cell changed since the last one, so the task waited for the next.
func TestLateWriteAfterSweepFoundByNextSweep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		write       time.Duration // into bucket b
		onTimeAfter bool
	}{
		{"after a sweep, then an on-time write", 5 * time.Second, true},
		{"before a full scan", 9 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lateWriteFoundByNextSweep(t, tc.write, tc.onTimeAfter)
		})
	}
}

func lateWriteFoundByNextSweep(t *testing.T, write time.Duration, onTimeAfter bool) {
	const every = 250 * time.Millisecond
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 120, BucketDuration: 10 * time.Second, DefaultTimeout: 30 * time.Second})
	trailing, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: offsetClock{e.clock, -4 * time.Second}})
	require.NoError(t, err)
	// The write after the late one comes from a producer of its own, so its touch is sent
	// before ScheduleTasks returns, not gathered with an earlier one and sent later.
	onTime, err := producer.New(cassandratest.Driver(e.s), producer.Config{Clock: e.clock})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock, LookAhead: 30 * time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	l := e.q.Layout()
	b := l.Bucket(e.clock.Now()) + 1
	at := func(d time.Duration) time.Time { return l.BucketStart(b).Add(d) }

	var lateID uuid.UUID
	var written, delivered time.Time
	poll := func() {
		for {
			got, err := c.AcquireTasks(ctx, 100)
			require.NoError(t, err)
			if len(got) == 0 {
				return
			}
			require.NoError(t, c.AckTasks(ctx, got...))
			for _, task := range got {
				if task.ID == lateID {
					delivered = e.clock.Now()
				}
			}
		}
	}
	// The first call sweeps, the first idle one scans in full, both 3.5 s before bucket b:
	// sweeps follow at 6.5 s and 16.5 s into b, full scans at 11.5 s (before b can be
	// passed, at its end plus MaxClockSkew) and 26.5 s.
	e.clock.Add(at(-3500 * time.Millisecond).Sub(e.clock.Now()))
	poll()
	poll()
	for delivered.IsZero() && e.clock.Now().Before(at(50*time.Second)) {
		e.clock.Add(every)
		now := e.clock.Now()
		switch {
		case now.Equal(at(2 * time.Second)): // b's cell changed since the full scan: read at every poll
			e.schedule(producer.Task{})
		case now.Equal(at(write)):
			ids, err := trailing.ScheduleTasks(ctx, []producer.Task{{Queue: e.q.Name}})
			require.NoError(t, err)
			lateID, written = ids[0], now
			if onTimeAfter {
				_, err = onTime.ScheduleTasks(ctx, []producer.Task{{Queue: e.q.Name}})
				require.NoError(t, err)
			}
		}
		poll()
		if now.Equal(written) {
			require.True(t, delivered.IsZero(), "the trailing producer's row was read at once: it is not below the floors")
		}
	}
	require.False(t, delivered.IsZero(), "the late task was not delivered within %s of its write", at(50*time.Second).Sub(written))
	require.LessOrEqual(t, delivered.Sub(written), consumer.SweepInterval+every, "the late task waited past a sweep and a poll")
}

// queryCounter counts the statements a session executes, and those whose first bound
// value is a partition key of a time shard counted by old.
type queryCounter struct {
	n, old atomic.Int64
	isOld  atomic.Value // func(timeShard int) bool
}

func (q *queryCounter) ObserveQuery(_ context.Context, o gocql.ObservedQuery) {
	q.n.Add(1)
	if len(o.Values) == 0 {
		return
	}
	key, _ := o.Values[0].(string)
	if _, ts, _, err := shard.ParseKey(key); err == nil {
		if f, ok := q.isOld.Load().(func(int) bool); ok && f(ts) {
			q.old.Add(1)
		}
	}
}

// Backed-off retries spread over a lap do not pin the consumers' cursors: each waits in
// the partition of its next due time, so a poll of an otherwise idle queue reads a few
// partitions per shard, not every bucket since the oldest pending retry.
func TestPendingRetriesDoNotPinCursor(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	counter := &queryCounter{}
	s := cassandratest.SessionFor(t, ks, func(c *gocql.ClusterConfig) { c.QueryObserver = counter })
	ctx := context.Background()
	const shards = 4
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "pending", ShardCount: shards, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	clock := testclock.New(base.Add(500 * time.Millisecond))
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	tasks := make([]producer.Task, 100)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: q.Name}
	}
	_, err = p.ScheduleTasks(ctx, tasks)
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 100)
	require.NoError(t, err)
	require.Len(t, got, 100)
	for i, task := range got { // next deliveries spread over the next 55 s of the lap
		require.NoError(t, c.Retry(ctx, task, time.Duration(10+i/2)*time.Second))
	}
	for range 24 { // 24 s pass; the retries due meanwhile are delivered and acked
		clock.Add(time.Second)
		due, err := c.AcquireTasks(ctx, 100)
		require.NoError(t, err)
		require.NoError(t, c.AckTasks(ctx, due...))
	}
	// One full scan (the consumer's default LookAhead is 5 s: a full scan every 2.5 s)
	// passes every drained bucket; the next full scan must not read them again.
	clock.Add(3 * time.Second)
	due, err := c.AcquireTasks(ctx, 100)
	require.NoError(t, err)
	require.NoError(t, c.AckTasks(ctx, due...))
	clock.Add(2600 * time.Millisecond) // a full scan, and no sweep (one per 10 s) yet
	l := q.Layout()
	bNow := l.Bucket(clock.Now())
	counter.isOld.Store(func(ts int) bool { // buckets that ended 5 to 28 s ago
		for b := bNow - 28; b <= bNow-6; b++ {
			if l.TimeShard(b) == ts {
				return true
			}
		}
		return false
	})
	before, oldBefore := counter.n.Load(), counter.old.Load()
	_, err = c.AcquireTasks(ctx, 100)
	require.NoError(t, err)
	reads, old := counter.n.Load()-before, counter.old.Load()-oldBefore
	t.Logf("one poll: %d reads, %d of partitions of buckets that ended 5-28 s ago", reads, old)
	require.Zero(t, old, "a poll reads every bucket since the oldest pending retry")
}

type queryObserver func(gocql.ObservedQuery)

func (f queryObserver) ObserveQuery(_ context.Context, o gocql.ObservedQuery) { f(o) }

// A drained partition that the cursor cannot pass yet, because an older partition of its
// shard holds a task whose lock another consumer keeps, is read from the start of its
// bucket (for rows written later than MaxClockSkew) once, not by every scan: under a
// backlog those reads walked every acked lease's tombstone again and again. A row written
// into it late all the same is still delivered, found through its signal cell.
func TestFinishedPartitionCheckedOnce(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	var watched atomic.Value // the partition key whose reads from its bucket's start count
	watched.Store("")
	var fromStart atomic.Int64
	s := cassandratest.SessionFor(t, ks, func(c *gocql.ClusterConfig) {
		c.QueryObserver = queryObserver(func(o gocql.ObservedQuery) {
			// The late-row check reads one row from the bucket's start, whatever the floors.
			if strings.HasPrefix(o.Statement, "SELECT priority, id FROM") && o.Values[0] == watched.Load() && o.Values[4] == 1 {
				fromStart.Add(1)
			}
		})
	})
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "blocked", ShardCount: 1, BucketCount: 120,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second, LockTTL: time.Minute})
	require.NoError(t, err)
	l := q.Layout()
	clock := testclock.New(base.Add(100 * time.Millisecond))
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: q.Name})
	require.NoError(t, err)
	other, err := lock.New(cassandratest.Driver(s), lock.Config{TTL: time.Minute})
	require.NoError(t, err)
	held, err := other.Acquire(ctx, l.Key(l.Bucket(clock.Now()), 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Release(context.Background()) })

	clock.Add(time.Second)
	b1 := l.Bucket(clock.Now())
	watched.Store(l.Key(b1, 0))
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id}, ids(got), "the first bucket's task is locked by another")
	require.NoError(t, c.AckTasks(ctx, got...))

	for range 5 { // each call a full scan (one per half LookAhead) that finds b1 finished
		clock.Add(3 * time.Second)
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, got)
	}
	require.EqualValues(t, 1, fromStart.Load(), "reads of the finished partition from its bucket's start")

	// A producer whose clock trails far past MaxClockSkew writes into b1 all the same.
	late, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: offsetClock{clock, l.BucketStart(b1).Add(500 * time.Millisecond).Sub(clock.Now())}})
	require.NoError(t, err)
	lateID, err := late.ScheduleTask(ctx, producer.Task{Queue: q.Name})
	require.NoError(t, err)
	bound := clock.Now().Add(consumer.SweepInterval + 2*time.Second)
	for clock.Now().Before(bound) {
		clock.Add(500 * time.Millisecond)
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		if len(got) > 0 {
			require.Equal(t, []uuid.UUID{lateID}, ids(got))
			return
		}
	}
	t.Fatalf("the late row in %s was not delivered within a sweep", l.Key(b1, 0))
}
