package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// A cancelled task's copies that its cancel could not see (docs/design.md, "Task lifecycle
// mechanics") must never run it: the simulator found three ways they did
// (seeds 10002570, 10020210 and 10004943 on 224f908).

// pendingRow schedules one task in a one-shard queue and returns it and its pending row.
func (e *env) pendingRow() (uuid.UUID, taskrow.Row) {
	e.t.Helper()
	id := e.schedule(producer.Task{Payload: []byte("x")})[0]
	key := e.q.Layout().Key(e.q.Layout().Bucket(e.clock.Now()), 0)
	rows := e.rowsIn(key)
	require.Len(e.t, rows, 1)
	return id, rows[0]
}

func (e *env) rowsIn(key string) []taskrow.Row {
	e.t.Helper()
	rows, _, err := store.Of(gocqlv1.New(e.s)).Leasing().Rows(context.Background(), key, []int8{0},
		shard.MinID(base.Add(-time.Hour)), shard.MaxID(e.clock.Now()), 10, 10, consumer.MaxTakeBytes)
	require.NoError(e.t, err)
	return rows
}

// copyAt writes beside the task a copy of r visible at at, as attempt 1 (a timeout
// marker, or a retry row when retrying), the way a lease fault leaves one, and returns it.
func (e *env) copyAt(r taskrow.Row, at time.Time, retrying bool) taskrow.Row {
	e.t.Helper()
	m := r
	m.ID, m.Attempt, m.Token, m.Retrying = shard.NewID(at), 1, 1, retrying
	m.Key = e.q.Layout().Key(e.q.Layout().Bucket(at), 0)
	require.NoError(e.t, store.Of(gocqlv1.New(e.s)).Tasks().Write(context.Background(), []store.Mutation{{Op: store.Insert, Row: m, Stamp: time.Now().Add(-time.Second).UnixMicro()}}))
	return m
}

// leasedThenCancelled schedules one task in a one-shard queue, leases it to c and cancels
// it with AfterLease. It returns the task, its pending row as it was, and the lease.
func (e *env) leasedThenCancelled(c *consumer.Consumer) (uuid.UUID, taskrow.Row, *consumer.Task) {
	e.t.Helper()
	id, row := e.pendingRow()
	got := e.acquire(c, 1)
	require.Equal(e.t, []uuid.UUID{id}, ids(got))
	require.NoError(e.t, e.p.Cancel(context.Background(), id, producer.CancelOptions{AfterLease: true}))
	return id, row, got[0]
}

// runsNever checks that nothing delivers task id from at on, and that its copy is gone.
func (e *env) runsNever(id uuid.UUID, at time.Time, copy taskrow.Row) {
	e.t.Helper()
	e.clock.Add(at.Sub(e.clock.Now()) + time.Millisecond)
	d := &deliveries{at: map[uuid.UUID][]time.Time{}}
	e.drain(d)
	require.Empty(e.t, d.of(id), "a copy ran the cancelled task")
	require.Empty(e.t, e.rowsIn(copy.Key), "the copy was not dropped")
	e.notFound(id)
}

// TestCancelledCopyLookupFails: the consumer that comes upon a cancelled task's timeout
// marker cannot read the task's index entry. It must not lease the marker (it did, "a
// duplicate at worst", which for a cancelled task is a run after its cancel returned).
func TestCancelledCopyLookupFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 4, BucketDuration: time.Hour})
	ctx := context.Background()
	id, row := e.pendingRow()
	deadline := e.clock.Now().Add(e.q.DefaultTimeout)
	m := e.copyAt(row, deadline, false)
	require.NoError(t, e.p.Cancel(ctx, id, producer.CancelOptions{}))

	e.clock.Add(deadline.Sub(e.clock.Now()) + time.Millisecond)
	c := e.consumer()
	down := errors.New("index unavailable")
	consumer.SetFailLookup(c, func(uuid.UUID) error { return down })
	got, _ := c.AcquireTasks(ctx, 10)
	require.Empty(t, got, "the marker of a cancelled task was leased when its lookup failed")
	require.Len(t, e.rowsIn(m.Key), 1, "the marker stays for a consumer that can look it up")
	e.runsNever(id, deadline, m)
}

// TestCancelOutranksALosingSwap: a consumer read the task's row and looked it up before
// the cancel removed the row; its index entry declaring the lease (token 1, step 0) lands
// after the cancel's, its swap does not apply, and the drop of its marker fails. The
// cancel's entry must still say cancelled, so that the marker is dropped when it comes due
// (it said in flight: the cancel's entry was stamped as the final step of token 0).
func TestCancelOutranksALosingSwap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 4, BucketDuration: time.Hour})
	ctx := context.Background()
	id, row := e.pendingRow()
	deadline := e.clock.Now().Add(e.q.DefaultTimeout)
	m := e.copyAt(row, deadline, false)
	require.NoError(t, e.p.Cancel(ctx, id, producer.CancelOptions{}))

	lease := taskindex.Write{Entry: taskindex.Entry{TaskID: id, State: taskindex.InFlight,
		Row:       taskindex.Loc{Key: m.Key, Priority: m.Priority, ID: m.ID},
		PrevState: taskindex.Scheduled, Prev: taskindex.Loc{Key: row.Key, Priority: row.Priority, ID: row.ID}},
		Stamp: taskindex.Stamp(id, 1, 0), TTL: time.Hour}
	_, err := store.Of(gocqlv1.New(e.s)).Index().Write(ctx, []taskindex.Write{lease}, 1)
	require.NoError(t, err)
	e.runsNever(id, deadline, m)
}

// TestCancelledRetryRowDropped: a task in flight is cancelled with AfterLease, and its
// holder's Retry leaves its new row: the settling of its unknown outcome took the old
// marker's absence (the cancel deleted it) for its own delete, or the drop of the new
// row failed. The retry row, and the Retry's index entry written after the cancel's, must
// not run the task (it was leased unlooked-up, as only expired markers were looked up).
func TestCancelledRetryRowDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 4, BucketDuration: time.Hour})
	ctx := context.Background()
	id, row, _ := e.leasedThenCancelled(e.consumer())

	due := e.clock.Now().Add(time.Second)
	r := e.copyAt(row, due, true)
	retry := taskindex.Write{Entry: taskindex.Entry{TaskID: id, State: taskindex.Retrying,
		Row:       taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID},
		PrevState: taskindex.InFlight}, // its old marker, which the cancel deleted
		Stamp: taskindex.Stamp(id, 1, 1), TTL: time.Hour}
	_, err := store.Of(gocqlv1.New(e.s)).Index().Write(ctx, []taskindex.Write{retry}, 1)
	require.NoError(t, err)
	e.runsNever(id, due, r)
}

// TestCancelledRescheduledRowDropped: a Reschedule wrote the task's row at its new time
// and crashed before it deleted the old one; a consumer leased the old row, and its index
// entry stopped naming the new; the task was cancelled with AfterLease. The new row,
// never delivered, must not run the task when it comes due (it did: only rows delivered
// before were looked up; simulator seed 1251).
func TestCancelledRescheduledRowDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 4, BucketDuration: time.Hour})
	id, row, _ := e.leasedThenCancelled(e.consumer())
	// The row the Reschedule wrote before the lease, written now: no one sees it before it
	// is due.
	later := e.clock.Now().Add(30 * time.Minute)
	moved := row
	moved.ID = shard.NewID(later)
	moved.Key = e.q.Layout().Key(e.q.Layout().Bucket(later), 0)
	require.NoError(t, store.Of(gocqlv1.New(e.s)).Tasks().Write(context.Background(), []store.Mutation{{Op: store.Insert, Row: moved, Stamp: time.Now().Add(-time.Second).UnixMicro()}}))
	e.runsNever(id, later, moved)
}

// TestReplayAfterCancel: a task in flight is cancelled with AfterLease, its holder then
// dead-letters it (the letter is written, the lease is found gone), and the dead letter is
// replayed. The replay is a new life of the task and runs, although its row was moved (an
// ID other than the task's) and the cancel's entry outranks the replay's (simulator seed
// 40001298 lost it once such rows were looked up before a lease).
func TestReplayAfterCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1, BucketCount: 4, BucketDuration: time.Hour})
	ctx := context.Background()
	c := e.consumer()
	id, _, task := e.leasedThenCancelled(c)
	require.ErrorIs(t, c.DeadLetter(ctx, task, errors.New("boom")), consumer.ErrLeaseLost)
	in, err := inspect.New(cassandratest.Driver(e.s), inspect.Config{Clock: e.clock})
	require.NoError(t, err)
	letters, err := in.DeadLetters(ctx, e.q.Name, inspect.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, letters, 1)
	_, err = e.p.ReplayDeadLetter(ctx, e.q.Name, letters[0].DeadLetterID)
	require.NoError(t, err)

	e.clock.Add(time.Second)
	d := &deliveries{at: map[uuid.UUID][]time.Time{}}
	e.drain(d)
	require.Len(t, d.of(id), 1, "the replayed task ran once")
}
