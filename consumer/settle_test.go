package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// A swap whose LWT applied but came back with an unknown outcome (a coordinator timeout,
// or a competing Paxos round that completed it) is settled as applied even when another
// consumer swapped in the same partition before the settling read: its receipt tells.
// Taking it as not applied would drop its markers and lose its tasks (seen with three
// nodes at RF 3 and a frozen node).

// errNoResponse is the error of a request no node answered in time.
var errNoResponse = func() error {
	e := driver.NewError(0, true, "no response received from cassandra within timeout period")
	e.Unanswered = true
	return e
}()

func TestUnknownSwapSettledAfterAnotherSwap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	answered(t, newEnv(t, shardqtype.QueueConfig{ShardCount: 1}), func(e *env) bool {
		want := e.schedule(producer.Task{}, producer.Task{}, producer.Task{}, producer.Task{})
		a, b := e.consumer(), e.consumer()
		var once sync.Once
		var swapped bool
		var swapErr error
		var fromB []*consumer.Task
		consumer.SetAfterSwap(a, func(err error) error {
			once.Do(func() {
				swapped, swapErr = true, err
				if err == nil {
					fromB = e.acquire(b, 10)
					err = errNoResponse
				}
			})
			return err
		})
		fromA, err := a.AcquireTasks(ctx, 2)
		if !swapped || swapErr != nil {
			t.Logf("the swap under test got no answer (%v); again on a new queue", swapErr)
			return false
		}
		require.NoError(t, err)
		require.Len(t, fromA, 2, "the swap applied: its tasks are a's")
		require.Len(t, fromB, 2)
		require.ElementsMatch(t, want, append(ids(fromA), ids(fromB)...))
		require.NoError(t, a.AckTasks(ctx, fromA...))
		require.NoError(t, b.AckTasks(ctx, fromB...))
		return true
	})
}

// answered runs scenario on new queues of e until the node answered the statement the
// scenario turns into an unknown outcome, at most five times: a real timeout of that
// statement leaves its outcome truly unknown, and nothing the scenario asserts follows.
func answered(t *testing.T, e *env, scenario func(e *env) bool) {
	t.Helper()
	for try := 1; !scenario(e); try++ {
		require.Less(t, try, 5, "the node never answered the statement under test")
		e = e.onQueue(fmt.Sprintf("%s_%d", e.q.Name, try))
	}
}

// A swap that did not apply, its outcome unknown, while another consumer took the same
// rows in between, is settled as not applied: its lease left no receipt. The rows are
// gone and the lock row names the other consumer, which once read as "applied" and ran
// the tasks twice (seen at RF 3 as one task delivered to two processes).
func TestUnknownSwapNotAppliedWhileAnotherTookTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	want := e.schedule(producer.Task{}, producer.Task{}, producer.Task{}, producer.Task{})
	a, b := e.consumer(), e.consumer()
	var fromB []*consumer.Task
	var before, after sync.Once
	consumer.SetBeforeSwap(a, func() {
		before.Do(func() {
			// a's lease ends here, as if it expired; then b takes everything.
			iter := e.s.Query(`SELECT shard_key, lock_holder FROM tasks WHERE kind = 0 ALLOW FILTERING`).Iter()
			var key string
			var holder *gocql.UUID
			for iter.Scan(&key, &holder) && holder == nil {
			}
			require.NoError(t, iter.Close())
			require.NotNil(t, holder, "a holds a lock")
			applied, err := e.s.Query(`UPDATE tasks SET lock_holder = null WHERE shard_key = ? AND kind = 0
				AND priority = 0 AND id = ? IF lock_holder = ?`, key, gocql.UUID(taskrow.LockID), *holder).MapScanCAS(map[string]any{})
			require.NoError(t, err)
			require.True(t, applied)
			fromB = e.acquire(b, 10)
		})
	})
	consumer.SetAfterSwap(a, func(err error) error {
		// Whatever came back, the swap could not apply: its lease was gone.
		after.Do(func() { err = errNoResponse })
		return err
	})
	require.Empty(t, e.acquire(a, 2), "a's swap did not apply")
	require.ElementsMatch(t, want, ids(fromB))
	require.NoError(t, b.AckTasks(ctx, fromB...))
}

// An ack batch that applied but came back with an unknown outcome is settled as acked:
// its markers are gone before their deadlines, and only the batch could have deleted
// them. Taking them as lost leases reports acks that did their work as failed (seen
// with three nodes at RF 3 under load).
func TestUnknownAckBatchSettledAsAcked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	answered(t, newEnv(t, shardqtype.QueueConfig{ShardCount: 1}), func(e *env) bool {
		want := e.schedule(producer.Task{}, producer.Task{}, producer.Task{})
		c := e.consumer()
		calls := 0
		var ackErr error
		consumer.SetAfterAck(c, func(err error) error {
			calls++
			if ackErr = err; err != nil {
				return err
			}
			return errNoResponse
		})
		got := e.acquire(c, 10)
		require.ElementsMatch(t, want, ids(got))
		err := c.AckTasks(ctx, got...)
		if ackErr != nil {
			t.Logf("the ack batch under test got no answer (%v); again on a new queue", ackErr)
			return false
		}
		require.NoError(t, err)
		require.Equal(t, 1, calls, "one batch for the partition")

		e.clock.Add(time.Hour)
		require.Empty(t, e.acquire(e.consumer(), 10), "acked tasks never come back")
		return true
	})
}
