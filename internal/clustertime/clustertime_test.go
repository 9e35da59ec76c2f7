package clustertime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/store"
)

type offsetHost time.Duration

func (h offsetHost) Now() time.Time { return time.Now().Add(time.Duration(h)) }

// A host whose clock is 5 s off measures the offset of the cluster's (the node runs on
// this host, so its clock is the real one), tells the cluster's time, and stamps writes
// no later than that time less WriteLag, whatever time it is given, and deletes WriteLag
// past it.
func TestMeasuresOffsetAndStampsBehindCluster(t *testing.T) {
	t.Parallel()
	s := cassandratest.Session(t)
	ctx := context.Background()
	for _, off := range []time.Duration{5 * time.Second, -5 * time.Second} {
		c := clustertime.New(store.Cassandra(s), offsetHost(off), nil)
		c.Ready(ctx)
		require.InDelta(t, float64(-off), float64(c.Offset()), float64(100*time.Millisecond), "offset of a host %v off", off)
		require.WithinDuration(t, time.Now(), c.Now(), 100*time.Millisecond)

		ahead := time.Now().Add(time.Hour)
		require.LessOrEqual(t, c.Stamp(ahead), time.Now().Add(-clustertime.WriteLag+100*time.Millisecond).UnixMicro(),
			"a writer's clock ahead is stamped by the cluster's time")
		behind := time.Now().Add(-time.Hour)
		require.Equal(t, behind.Add(-clustertime.WriteLag).UnixMicro(), c.Stamp(behind), "a trailing writer stamps by its own clock")
		require.InDelta(t, time.Now().Add(clustertime.WriteLag).UnixMicro(), c.DeleteStamp(), float64(100*time.Millisecond/time.Microsecond),
			"deletes are stamped WriteLag past the cluster's time, whatever the host's")
	}
}

// failFirst fails its first read of the coordinators' clock, as a node that times out.
type failFirst struct {
	clustertime.Coordinator
	failed atomic.Bool
}

var errTimedOut = errors.New("timed out")

func (f *failFirst) Now(ctx context.Context) (time.Time, error) {
	if f.failed.CompareAndSwap(false, true) {
		return time.Time{}, errTimedOut
	}
	return f.Coordinator.Now(ctx)
}

// A failed first measure leaves the host's time in use only until RetryFailed has passed,
// not a whole Refresh: a host 5 s ahead would lease tasks early all that time.
func TestFailedMeasureRetriedSoon(t *testing.T) {
	t.Parallel()
	s := cassandratest.Session(t)
	c := clustertime.New(&failFirst{Coordinator: store.Cassandra(s)}, offsetHost(5*time.Second), nil)
	c.Ready(context.Background())
	require.Zero(t, c.Offset(), "the first measure failed")
	// Meanwhile a host ahead by up to Unmeasured stamps its writes before the cluster's time
	// less WriteLag, and its deletes after the cluster's time plus WriteLag.
	require.LessOrEqual(t, c.Stamp(c.Now()), time.Now().Add(5*time.Second-clustertime.WriteLag-clustertime.Unmeasured).UnixMicro())
	require.GreaterOrEqual(t, c.DeleteStamp(), time.Now().Add(5*time.Second+clustertime.WriteLag+clustertime.Unmeasured-100*time.Millisecond).UnixMicro())
	deadline := time.Now().Add(15 * time.Second)
	for c.Offset() == 0 {
		require.True(t, time.Now().Before(deadline), "not measured again within RetryFailed")
		c.Now()
		time.Sleep(50 * time.Millisecond)
	}
	require.InDelta(t, float64(-5*time.Second), float64(c.Offset()), float64(100*time.Millisecond))
}
