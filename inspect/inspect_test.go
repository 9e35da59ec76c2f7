package inspect_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// world is a queue holding rows of every class, written by producers and consumers
// whose clocks stand where each class needs them, so nothing waits for real time.
type world struct {
	s              *gocql.Session
	q              shardqtype.QueueConfig
	past, stranded time.Time   // the clocks of the past and stranded writers
	soon           time.Time   // when the 4 scheduled tasks are due
	ids            []uuid.UUID // every task scheduled
	dead           uuid.UUID   // the one dead-lettered
	leased         uuid.UUID   // one in flight
	keyed          uuid.UUID   // the one of key "report"
}

// newWorld writes, in a queue of 2 shards and a 10-minute lap:
//   - 4 tasks due now, leased by a consumer for 30 s (in flight), one of which it then
//     dead-letters and one retries in 5 minutes: 2 in flight, 1 retrying, 1 dead letter;
//   - 5 tasks written by a producer whose clock trails by 2 minutes, 2 of which a
//     consumer on that clock leases for 1 s: 3 due, 2 due again (their leases ran out
//     2 minutes ago);
//   - 4 tasks due in 3 minutes (scheduled), one of them of key "report", and 1 due in an
//     hour (beyond the lap);
//   - 1 task written by a producer 35 minutes behind: older than the previous lap of its
//     partition, so below where consumers read it (the consumers never deliver it).
func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 2, BucketCount: 60, BucketDuration: 10 * time.Second})
	require.NoError(t, err)
	w := &world{s: s, q: q}
	now := time.Now()

	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	schedule := func(p *producer.Producer, n int, task producer.Task) []uuid.UUID {
		tasks := make([]producer.Task, n)
		for i := range tasks {
			tasks[i] = task
			tasks[i].Queue = q.Name
		}
		ids, err := p.ScheduleTasks(ctx, tasks)
		require.NoError(t, err)
		w.ids = append(w.ids, ids...)
		return ids
	}
	acquire := func(c *consumer.Consumer, n int) []*consumer.Task {
		got, err := c.AcquireTasks(ctx, n)
		require.NoError(t, err)
		require.Len(t, got, n)
		return got
	}

	schedule(p, 4, producer.Task{Payload: []byte("leased"), Priority: 9})
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	leased := acquire(c, 4)
	require.NoError(t, c.DeadLetter(ctx, leased[0], errors.New("boom")))
	w.dead, w.leased = leased[0].ID, leased[2].ID
	require.NoError(t, c.Retry(ctx, leased[1], 5*time.Minute))

	w.past = now.Add(-2 * time.Minute)
	pastClock := testclock.New(w.past)
	pp, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: pastClock})
	require.NoError(t, err)
	schedule(pp, 5, producer.Task{Payload: []byte("late"), Timeout: time.Second})
	cp, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: pastClock})
	require.NoError(t, err)
	acquire(cp, 2)

	w.soon = now.Add(3 * time.Minute)
	schedule(p, 3, producer.Task{Payload: []byte("soon"), DueAt: w.soon})
	w.keyed = schedule(p, 1, producer.Task{Payload: []byte("soon"), DueAt: w.soon, Key: "report"})[0]
	schedule(p, 1, producer.Task{Payload: []byte("next hour"), DueAt: now.Add(time.Hour)})

	w.stranded = now.Add(-35 * time.Minute)
	ps, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: testclock.New(w.stranded)})
	require.NoError(t, err)
	stranded := schedule(ps, 1, producer.Task{Payload: []byte("stranded")})[0]
	// A swap since then recorded its partition's floor above it, as when a write comes
	// later than the clock skew allows: consumers do not read it until a sweep finds it.
	l := q.Layout()
	require.NoError(t, s.Query(`UPDATE tasks SET floors = ? WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`,
		map[int8]gocql.UUID{0: gocql.UUID(shard.MaxID(w.stranded.Add(time.Second)))},
		l.Key(l.Bucket(w.stranded), l.ShardFor(stranded)), gocql.UUID(taskrow.LockID)).Exec())

	return w
}

func (w *world) inspector(t *testing.T, cfg inspect.Config) *inspect.Inspector {
	t.Helper()
	in, err := inspect.New(cassandratest.Driver(w.s), cfg)
	require.NoError(t, err)
	return in
}

func TestStats(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.inspector(t, inspect.Config{})
	ctx := context.Background()
	var mu sync.Mutex
	var calls, last, total int
	st, err := in.Stats(ctx, w.q.Name, inspect.StatsOptions{Progress: func(done, all int) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, last+1, done, "progress counts up one read at a time")
		calls, last, total = calls+1, done, all
	}})
	require.NoError(t, err)
	require.Empty(t, st.Failed)
	require.Equal(t, inspect.Counts{Due: 3, DueAgain: 2, Scheduled: 4, InFlight: 2, Retrying: 1}, st.Total,
		"the stranded task lies below its partition's floors, the next hour's beyond the lap")
	require.Len(t, st.Shards, 2)
	var sum inspect.Counts
	for _, c := range st.Shards {
		sum.Due += c.Due
		sum.DueAgain += c.DueAgain
		sum.Scheduled += c.Scheduled
		sum.InFlight += c.InFlight
		sum.Retrying += c.Retrying
	}
	require.Equal(t, st.Total, sum)
	require.Len(t, st.Lap, 2)
	l := w.q.Layout()
	soon := l.TimeShard(l.Bucket(w.soon))
	var soonScheduled int
	for s, cells := range st.Lap {
		require.Len(t, cells, 60, "one cell per bucket of the lap")
		var row inspect.Counts
		for _, c := range cells {
			row.Due += c.Due
			row.DueAgain += c.DueAgain
			row.Scheduled += c.Scheduled
			row.InFlight += c.InFlight
			row.Retrying += c.Retrying
		}
		require.Equal(t, st.Shards[s], row, "a shard's partitions add up to its counts")
		soonScheduled += cells[soon].Scheduled
	}
	require.Equal(t, 4, soonScheduled, "the tasks due in 3 minutes are in the partitions of their bucket")
	require.WithinDuration(t, w.past, st.OldestDue, time.Second, "the oldest due task is the one written two minutes ago")
	require.Equal(t, 1, st.DeadLetters)
	require.Equal(t, 120, st.Partitions)
	require.Equal(t, 12, st.RowsRead)
	require.Equal(t, 10*time.Minute, st.Layout.Lap())
	require.Equal(t, 31, st.DeadDays, "30 days of letters span 31 daily partitions")
	require.Equal(t, st.Partitions+st.DeadDays, total)
	require.Equal(t, total, calls)

	t.Run("full", func(t *testing.T) {
		st, err := in.Stats(ctx, w.q.Name, inspect.StatsOptions{Full: true})
		require.NoError(t, err)
		require.Equal(t, inspect.Counts{Due: 4, DueAgain: 2, Scheduled: 4, InFlight: 2, Retrying: 1, BehindFloors: 1}, st.Total)
		require.WithinDuration(t, w.stranded, st.OldestDue, time.Second)
	})
	t.Run("missing queue", func(t *testing.T) {
		_, err := in.Stats(ctx, "missing", inspect.StatsOptions{})
		require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
	})
	t.Run("pages", func(t *testing.T) {
		// Counting streams pages: pages of two rows give the same counts.
		st, err := w.inspector(t, inspect.Config{PageSize: 2, PartitionsInFlight: 1}).Stats(ctx, w.q.Name, inspect.StatsOptions{})
		require.NoError(t, err)
		require.Equal(t, inspect.Counts{Due: 3, DueAgain: 2, Scheduled: 4, InFlight: 2, Retrying: 1}, st.Total)
		require.Equal(t, 12, st.RowsRead)
	})
}

// TestTaskScan: every task the queue still holds is listed, whatever its class or time
// (the stranded one below its floors, the next hour's beyond the lap), and only those:
// not the dead-lettered one. (internal/taskscan is tested here, beside the world.)
func TestTaskScan(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids, err := taskscan.TaskIDs(context.Background(), cassandratest.Driver(w.s), w.q, 8, 5000)
	require.NoError(t, err)
	want := slices.DeleteFunc(slices.Clone(w.ids), func(id uuid.UUID) bool { return id == w.dead })
	require.Len(t, want, 14)
	require.ElementsMatch(t, want, ids)

	t.Run("pages", func(t *testing.T) {
		ids, err := taskscan.TaskIDs(context.Background(), cassandratest.Driver(w.s), w.q, 1, 2)
		require.NoError(t, err)
		require.ElementsMatch(t, want, ids)
	})
}

func TestPeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 3})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	var tasks []producer.Task
	for i, prio := range []int{3, 9, 0, 9, 5} {
		tasks = append(tasks, producer.Task{Queue: q.Name, Priority: prio, Payload: []byte{byte('a' + i)}})
	}
	tasks = append(tasks, producer.Task{Queue: q.Name, Priority: 9, Payload: []byte("later"), DueAt: time.Now().Add(time.Minute)})
	ids, err := p.ScheduleTasks(ctx, tasks)
	require.NoError(t, err)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)

	got, err := in.Peek(ctx, q.Name, 3)
	require.NoError(t, err)
	require.Empty(t, got.Failed)
	require.Equal(t, []uuid.UUID{ids[1], ids[3], ids[4]}, taskIDs(got.Tasks), "highest priority first, then earliest")
	require.Equal(t, []byte("b"), got.Tasks[0].Payload)
	require.Equal(t, 9, got.Tasks[0].Priority)
	require.Zero(t, got.Tasks[0].Attempt)
	require.Equal(t, q.DefaultTimeout, got.Tasks[0].Timeout)
	require.Equal(t, shardqtype.TaskScheduled, got.Tasks[0].State)
	require.Equal(t, q.Name, got.Tasks[0].Queue)
	require.NotEmpty(t, got.Tasks[0].PartitionKey)
	byID, err := in.Task(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, *byID, got.Tasks[0], "a peeked task reads as one looked up")

	got, err = in.Peek(ctx, q.Name, inspect.MaxPeek)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[1], ids[3], ids[4], ids[0], ids[2]}, taskIDs(got.Tasks), "the task due in a minute is not due")

	var locks int
	require.NoError(t, s.Query(`SELECT COUNT(*) FROM tasks WHERE kind = 0 ALLOW FILTERING`).Scan(&locks))
	require.Zero(t, locks, "peeking takes no lock")
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	leased, err := c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Len(t, leased, 5, "peeking leased nothing")
	for _, l := range leased {
		require.Equal(t, 1, l.Attempt)
	}

	got, err = in.Peek(ctx, q.Name, 10)
	require.NoError(t, err)
	require.Empty(t, got.Tasks, "leased tasks are not due")

	_, err = in.Peek(ctx, q.Name, 0)
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	_, err = in.Peek(ctx, q.Name, inspect.MaxPeek+1)
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	_, err = in.Peek(ctx, "missing", 1)
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
}

func taskIDs(ts []shardqtype.TaskInfo) []uuid.UUID {
	var out []uuid.UUID
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	qs, err := in.Queues(ctx)
	require.NoError(t, err)
	require.Empty(t, qs)
	for _, name := range []string{"zeta", "alpha"} {
		_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: name, ShardCount: 3})
		require.NoError(t, err)
	}
	qs, err = in.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.Equal(t, "alpha", qs[0].Config.Name)
	require.Equal(t, "zeta", qs[1].Config.Name)
	require.Equal(t, 3, qs[1].Config.ShardCount)
	require.WithinDuration(t, time.Now(), qs[0].CreatedAt, time.Minute)

	one, err := in.Queue(ctx, "zeta")
	require.NoError(t, err)
	require.Equal(t, qs[1], one)
	_, err = in.Queue(ctx, "missing")
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	_, err := inspect.New(cassandratest.Driver(s), inspect.Config{PageSize: -1})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	require.ErrorContains(t, err, "Config.PageSize")
	_, err = inspect.New(cassandratest.Driver(s), inspect.Config{PartitionsInFlight: -1})
	require.ErrorContains(t, err, "Config.PartitionsInFlight")
	_, err = inspect.New(nil, inspect.Config{})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
}

// TestTask looks tasks up by ID and by key, in each state the world holds them.
func TestTask(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.inspector(t, inspect.Config{})
	ctx := context.Background()

	keyed, err := in.TaskByKey(ctx, w.q.Name, "report")
	require.NoError(t, err)
	require.Equal(t, w.keyed, keyed.ID)
	require.Equal(t, "report", keyed.Key)
	require.Equal(t, shardqtype.TaskScheduled, keyed.State)
	require.Equal(t, []byte("soon"), keyed.Payload)
	require.Equal(t, w.q.DefaultTimeout, keyed.Timeout)
	require.NotEmpty(t, keyed.PartitionKey)
	byID, err := in.Task(ctx, w.keyed)
	require.NoError(t, err)
	require.Equal(t, keyed, byID)

	leased, err := in.Task(ctx, w.leased)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskInFlight, leased.State)
	require.Equal(t, 1, leased.Attempt)
	require.Equal(t, leased.Deadline, leased.VisibleAt, "an in-flight task's marker is visible at its lease deadline")

	dead, err := in.Task(ctx, w.dead)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskDead, dead.State)
	require.Equal(t, "boom", dead.LastError)

	_, err = in.Task(ctx, shard.NewID(time.Now()))
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
	_, err = in.Task(ctx, uuid.New())
	require.ErrorIs(t, err, shardqtype.ErrInvalid, "not a task ID")
	_, err = in.TaskByKey(ctx, w.q.Name, "nobody's")
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
}

// TestDeadLetters lists dead letters in pages, newest first, reads one and counts them;
// each reads back as the task it was, dead.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 1})
	require.NoError(t, err)
	clock := testclock.New(time.Now())
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	tasks := make([]producer.Task, 5)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: q.Name, Payload: []byte{byte('a' + i)}, Priority: i}
	}
	taskIDs, err := p.ScheduleTasks(ctx, tasks)
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 5)
	require.NoError(t, err)
	require.Len(t, got, 5)
	byTask := map[uuid.UUID]int{}
	var order []uuid.UUID // the order of death
	for _, task := range got {
		clock.Add(time.Millisecond) // distinct times of death
		require.NoError(t, c.DeadLetter(ctx, task, errors.New("failed "+string(task.Payload))))
		order = append(order, task.ID)
		byTask[task.ID] = int(task.Payload[0] - 'a')
	}

	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{Clock: clock})
	require.NoError(t, err)
	var listed []shardqtype.TaskInfo
	var before uuid.UUID
	for {
		page, err := in.DeadLetters(ctx, q.Name, inspect.DeadLetterQuery{Limit: 2, Before: before})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 2)
		listed = append(listed, page...)
		before = page[len(page)-1].DeadLetterID
	}
	require.Len(t, listed, 5)
	for i, d := range listed {
		require.Equal(t, order[4-i], d.ID, "newest first")
		n := byTask[d.ID]
		require.Equal(t, taskIDs[n], d.ID)
		require.Equal(t, q.Name, d.Queue)
		require.Equal(t, shardqtype.TaskDead, d.State)
		require.Equal(t, []byte{byte('a' + n)}, d.Payload)
		require.Equal(t, n, d.Priority)
		require.Equal(t, 1, d.Attempt)
		require.Equal(t, q.DefaultTimeout, d.Timeout)
		require.Equal(t, "failed "+string(d.Payload), d.LastError)
		require.WithinDuration(t, clock.Now(), d.FinishedAt, time.Second)
		require.WithinDuration(t, d.FinishedAt, shard.IDTime(d.DeadLetterID), time.Millisecond,
			"a letter's ID carries when it died")

		one, err := in.DeadLetter(ctx, q.Name, d.DeadLetterID)
		require.NoError(t, err)
		require.Equal(t, d, *one)
		byID, err := in.Task(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, shardqtype.TaskDead, byID.State)
		require.Equal(t, d.LastError, byID.LastError)
	}
	n, err := in.CountDeadLetters(ctx, q.Name)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	require.NoError(t, p.PurgeDeadLetter(ctx, q.Name, listed[0].DeadLetterID))
	_, err = in.DeadLetter(ctx, q.Name, listed[0].DeadLetterID)
	require.ErrorIs(t, err, producer.ErrDeadLetterNotFound)
	n, err = in.CountDeadLetters(ctx, q.Name)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	_, err = in.DeadLetters(ctx, q.Name, inspect.DeadLetterQuery{Limit: inspect.MaxDeadLetterLimit + 1})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	_, err = in.DeadLetters(ctx, q.Name, inspect.DeadLetterQuery{Before: uuid.New()})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
	_, err = in.DeadLetters(ctx, "missing", inspect.DeadLetterQuery{})
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
	_, err = in.CountDeadLetters(ctx, "missing")
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
}
