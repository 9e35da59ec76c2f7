package producer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// cancelEnv gives a test a producer and an inspector of queue "q" on one clock.
func cancelEnv(t *testing.T) (*producer.Producer, *inspect.Inspector) {
	s, _ := setup(t)
	clock := testclock.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{Clock: clock})
	require.NoError(t, err)
	return p, in
}

// TestCancelRecordFails: a cancel whose index write fails is tried again, and a cancel it
// never manages to record is reported, not returned as a success: without the entry a copy
// the cancel could not see would run the task.
func TestCancelRecordFails(t *testing.T) {
	t.Parallel()
	p, in := cancelEnv(t)
	ctx := context.Background()
	down := errors.New("index unavailable")

	fails := 2
	producer.SetFailRecord(p, func() error {
		if fails == 0 {
			return nil
		}
		fails--
		return down
	})
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: "q", Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, p.Cancel(ctx, id, producer.CancelOptions{}), "two failed writes, then one that applied")
	_, err = in.Task(ctx, id)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
	require.ErrorContains(t, err, "cancelled")

	producer.SetFailRecord(p, func() error { return down })
	id, err = p.ScheduleTask(ctx, producer.Task{Queue: "q", Payload: []byte("y")})
	require.NoError(t, err)
	require.ErrorIs(t, p.Cancel(ctx, id, producer.CancelOptions{}), down)
	_, err = in.Task(ctx, id)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound, "the row is gone all the same")
}

// TestCancelUnsettledThenGoneIsRecorded: a cancel whose removal applied but reported an
// unknown outcome looks again, finds the task gone, and records the cancel all the same:
// without the entry, a copy it could not see (the marker of a take whose swap failed)
// would run the task after Cancel returned (simulator seed 61004694).
func TestCancelUnsettledThenGoneIsRecorded(t *testing.T) {
	t.Parallel()
	p, in := cancelEnv(t)
	ctx := context.Background()
	once := true
	producer.SetAfterRemove(p, func(removed bool, err error) (bool, error) {
		if once && err == nil && removed {
			once = false
			return false, fmt.Errorf("%w: reply lost", lwt.ErrOutcomeUnknown)
		}
		return removed, err
	})
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: "q", Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, p.Cancel(ctx, id, producer.CancelOptions{}))
	require.False(t, once, "the removal applied")
	_, err = in.Task(ctx, id)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
	require.ErrorContains(t, err, "cancelled", "the cancel was not recorded")
}
