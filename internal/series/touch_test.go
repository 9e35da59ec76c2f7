package series_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// failing returns the series environment of a process on cluster whose requests named in
// faults meet their fault, and whose Clock is clock.
func failing(t *testing.T, cluster *memstore.Cluster, clock shardqtype.Clock, faults map[string]memstore.Fault) *series.Env {
	t.Helper()
	st := cluster.Client(memstore.ClientConfig{Clock: time.Now, Gate: func(_ context.Context, r memstore.Request) (memstore.Fault, error) {
		return faults[r.Op], nil
	}})
	cl := clustertime.New(st, nil, nil)
	require.NoError(t, cl.Ready(context.Background()))
	return &series.Env{Store: st.Series(), Tasks: st.Tasks(), Clock: clock, Cluster: cl, Log: slog.New(slog.DiscardHandler),
		Signals: signal.NewToucher(st.Signals(), nil), Bus: &wakeup.Bus{}}
}

// touched reports whether the signal cell of task id's row in q's ring shows a touch.
func touched(t *testing.T, cluster *memstore.Cluster, q shardqtype.QueueConfig, id uuid.UUID) bool {
	t.Helper()
	l := q.Layout()
	b := l.Bucket(shard.IDTime(id))
	cells, _, err := cluster.Client(memstore.ClientConfig{Clock: time.Now}).Signals().LastTouches(context.Background(), l.Ring(), b, b)
	require.NoError(t, err)
	_, ok := cells[signal.Cell{Queue: l.Ring(), Bucket: b, Shard: l.ShardFor(id)}]
	return ok
}

// An occurrence whose write timed out but applied is touched all the same, and a keeper
// that finds an occurrence written but neither recorded nor touched (its writer died after
// the write) touches it again: a row with no touch lies below idle consumers' floors for
// a lap, and its series stalls. The simulator found the two with seed 61000691.
func TestUnrecordedOccurrenceTouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := shardqtype.QueueConfig{Name: "q", BucketCount: 60, BucketDuration: time.Second, ShardCount: 2,
		DefaultTimeout: 5 * time.Second}
	spec := series.Spec{Every: time.Minute}

	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	timedOut := failing(t, cluster, testclock.New(time.Now()), map[string]memstore.Fault{"Tasks.Write": memstore.TimeoutApplied})
	st, _, err := timedOut.Create(ctx, q, "s", spec)
	require.Error(t, err, "the occurrence's write timed out")
	require.True(t, touched(t, cluster, q, st.TaskID), "a write that timed out may have applied: touched")

	cluster, err = memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	died := failing(t, cluster, testclock.New(time.Now()), map[string]memstore.Fault{
		"Tasks.Write": memstore.TimeoutApplied, "Signals.Touch": memstore.Unavailable})
	st, _, err = died.Create(ctx, q, "s", spec)
	require.Error(t, err)
	require.False(t, touched(t, cluster, q, st.TaskID), "the writer's touch did not apply")
	later := testclock.New(time.Now().Add(series.RepairAfter + time.Second))
	keeper := failing(t, cluster, later, nil)
	require.NoError(t, keeper.Keep(ctx, q, func(context.Context, uuid.UUID) (series.Status, error) { return series.Waiting, nil }))
	require.True(t, touched(t, cluster, q, st.TaskID), "the keeper touched the occurrence it found written")
	kept, err := keeper.Load(ctx, q.Name, "s", false)
	require.NoError(t, err)
	require.False(t, kept.Pending(), "and recorded it written")
}
