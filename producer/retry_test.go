package producer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
)

// A write that timed out is sent again with its first write timestamp: here the first
// copy applied and a consumer took and acked the task before the second copy landed,
// which the consumer's delete shadows, so the task runs once and the call succeeds.

// errNoResponse is the error of a request no node answered in time.
var errNoResponse = func() error {
	e := driver.NewError(0, true, "no response received from cassandra within timeout period")
	e.Unanswered = true
	return e
}()

func TestTimedOutWriteSentAgain(t *testing.T) {
	t.Parallel()
	s, q := setup(t)
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)

	attempts := 0
	var taken []*consumer.Task
	var takeErr error
	producer.SetAfterWrite(p, func(err error) error {
		attempts++
		if attempts > 1 || err != nil {
			return err
		}
		clock.Add(100 * time.Millisecond)
		if taken, takeErr = c.AcquireTasks(ctx, 10); takeErr == nil {
			takeErr = c.AckTasks(ctx, taken...)
		}
		return errNoResponse
	})
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, takeErr)
	require.Equal(t, 2, attempts)
	require.Len(t, taken, 1)
	require.Equal(t, id, taken[0].ID)

	// Past a sweep, the consumer has read every partition again: nothing is left.
	bound := clock.Now().Add(time.Second + consumer.DefaultMaxClockSkew + consumer.SweepInterval)
	for clock.Now().Before(bound) {
		clock.Add(250 * time.Millisecond)
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, got, "the second copy of an acked task came back")
	}
}

// A write that keeps timing out is reported after WriteAttempts sends, and one that fails
// otherwise is not sent again.
func TestWriteAttemptsBounded(t *testing.T) {
	t.Parallel()
	s, q := setup(t)
	ctx := context.Background()
	p, err := producer.New(cassandratest.Driver(s), producer.Config{WriteAttempts: 2})
	require.NoError(t, err)
	attempts := 0
	producer.SetAfterWrite(p, func(error) error { attempts++; return errNoResponse })
	_, err = p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}})
	var perr *producer.PartialError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, []int{0}, perr.Failed)
	require.ErrorIs(t, err, errNoResponse)
	require.Equal(t, 2, attempts)

	refused := errors.New("refused")
	attempts = 0
	producer.SetAfterWrite(p, func(error) error { attempts++; return refused })
	_, err = p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}})
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, attempts)
}
