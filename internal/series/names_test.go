package series_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/shardqtype"
)

// offsetHost is a host whose clock is off the cluster's by d.
type offsetHost time.Duration

func (h offsetHost) Now() time.Time { return time.Now().Add(time.Duration(h)) }

// env is a series environment of a process whose host clock is off by d, on cluster.
func env(t *testing.T, cluster *memstore.Cluster, d time.Duration) *series.Env {
	t.Helper()
	host := offsetHost(d)
	st := cluster.Client(memstore.ClientConfig{Clock: host.Now})
	clock := clustertime.New(st, host, nil)
	require.NoError(t, clock.Ready(context.Background()))
	return &series.Env{Store: st.Series(), Tasks: st.Tasks(), Clock: clock, Cluster: clock,
		Signals: signal.NewToucher(st.Signals(), nil), Bus: &wakeup.Bus{}}
}

// A series deleted by a process whose host clock leads by 5 s and created again at once by
// another is listed, so kept: the name's writes are stamped by the cluster's time. Stamped
// by each host's clock, the delete shadowed the name written after it.
func TestNameWrittenAfterItsDeleteStays(t *testing.T) {
	t.Parallel()
	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	ahead, behind := env(t, cluster, 5*time.Second), env(t, cluster, 0)
	q := shardqtype.QueueConfig{Name: "q", BucketCount: 60, BucketDuration: time.Second, ShardCount: 1,
		DefaultTimeout: 5 * time.Second}
	spec := series.Spec{Every: time.Minute}
	ctx := context.Background()

	st, created, err := ahead.Create(ctx, q, "s", spec)
	require.NoError(t, err)
	require.True(t, created)
	deleted, err := ahead.Delete(ctx, st)
	require.NoError(t, err)
	require.True(t, deleted)
	_, created, err = behind.Create(ctx, q, "s", spec)
	require.NoError(t, err)
	require.True(t, created)
	names, err := behind.Names(ctx, q.Name)
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, names, "the series created again is listed")
}

// A pending occurrence whose place is over half a lap old is not written there to be
// cancelled (withdrawing a paused series): a row written there lies where consumers have
// passed, and one whose cancel then fails is never run and stalls its series. Its place
// is deleted instead, stamped past the occurrence's own write, so a write of it still on
// its way adds nothing. A place still fresh is left to the write and the cancel.
func TestStaleOccurrenceUnplaced(t *testing.T) {
	t.Parallel()
	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	e := env(t, cluster, 0)
	q := shardqtype.QueueConfig{Name: "q", BucketCount: 4, BucketDuration: time.Second, ShardCount: 1,
		DefaultTimeout: 5 * time.Second}
	ctx := context.Background()
	now := e.Clock.Now()
	at := now.Add(-3 * time.Second) // over half the 4 s lap
	old := series.State{Queue: "q", Name: "s", Seq: 3, Open: true, TaskID: taskid.New(at, "q"), Nominal: at,
		Stamp: e.Cluster.Stamp(at), Spec: series.Spec{Every: time.Minute}}
	require.True(t, old.Pending())

	gone, err := e.Unplace(ctx, q, old)
	require.NoError(t, err)
	require.True(t, gone)
	require.NoError(t, e.Write(ctx, q, old), "a write of it still on its way")
	l := q.Layout()
	_, found, err := e.Tasks.Read(ctx, l.Key(l.Bucket(at), 0), 0, old.TaskID)
	require.NoError(t, err)
	require.False(t, found, "the delete, stamped later, shadows it")

	fresh := old
	fresh.TaskID, fresh.Nominal, fresh.Stamp = taskid.New(now, "q"), now, e.Cluster.Stamp(now)
	gone, err = e.Unplace(ctx, q, fresh)
	require.NoError(t, err)
	require.False(t, gone, "a fresh place is written and cancelled")
}
