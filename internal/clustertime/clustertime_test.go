package clustertime_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/testlog"
	"github.com/shardq/shardq/shardqtype"
)

type offsetHost time.Duration

func (h offsetHost) Now() time.Time { return time.Now().Add(time.Duration(h)) }

// A host whose clock is 5 s off measures the offset of the cluster's (the node runs on
// this host, so its clock is the real one), tells the cluster's time, and stamps writes
// no later than that time less WriteLag, whatever time it is given, and deletes WriteLag
// past it.
//
// Each measure is off by up to half its round trip, which on the two-core CI box running
// three nodes and other packages' tests has passed 100 ms: the checks allow tolerance.
func TestMeasuresOffsetAndStampsBehindCluster(t *testing.T) {
	const tolerance = 300 * time.Millisecond
	t.Parallel()
	s := cassandratest.Session(t)
	ctx := context.Background()
	_, node, err := store.Of(gocqlv1.New(s)).Now(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, node, "a node's clock is read with its host ID")
	for _, off := range []time.Duration{5 * time.Second, -5 * time.Second} {
		c := clustertime.New(store.Of(gocqlv1.New(s)), offsetHost(off), nil)
		require.NoError(t, c.Ready(ctx))
		require.InDelta(t, float64(-off), float64(c.Offset()), float64(tolerance), "offset of a host %v off", off)
		require.Less(t, c.Spread(), tolerance, "the test nodes share this host's clock")
		require.WithinDuration(t, time.Now(), c.Now(), tolerance)

		ahead := time.Now().Add(time.Hour)
		require.LessOrEqual(t, c.Stamp(ahead), time.Now().Add(-clustertime.WriteLag+tolerance).UnixMicro(),
			"a writer's clock ahead is stamped by the cluster's time")
		behind := time.Now().Add(-time.Hour)
		require.Equal(t, behind.Add(-clustertime.WriteLag).UnixMicro(), c.Stamp(behind), "a trailing writer stamps by its own clock")
		require.InDelta(t, time.Now().Add(clustertime.WriteLag).UnixMicro(), c.DeleteStamp(), float64(tolerance/time.Microsecond),
			"deletes are stamped WriteLag past the cluster's time, whatever the host's")
	}
}

// failFirst fails its first read of the coordinators' clock, as a node that times out.
type failFirst struct {
	clustertime.Coordinator
	failed atomic.Bool
}

var errTimedOut = errors.New("timed out")

func (f *failFirst) Now(ctx context.Context) (time.Time, string, error) {
	if f.failed.CompareAndSwap(false, true) {
		return time.Time{}, "", errTimedOut
	}
	return f.Coordinator.Now(ctx)
}

// A failed first measure makes Ready fail: nothing may be stamped or judged due by a
// host's clock whose offset is unknown (5 s ahead, it would lease tasks 5 s early). The
// next call measures again, and so does Now once RetryFailed has passed, not a whole
// Refresh.
func TestFailedMeasureRetriedSoon(t *testing.T) {
	t.Parallel()
	s := cassandratest.Session(t)
	ctx := context.Background()
	for _, ready := range []bool{true, false} {
		c := clustertime.New(&failFirst{Coordinator: store.Of(gocqlv1.New(s))}, offsetHost(5*time.Second), nil)
		err := c.Ready(ctx)
		require.ErrorIs(t, err, shardqtype.ErrClockUnmeasured)
		require.ErrorIs(t, err, errTimedOut)
		if ready {
			require.NoError(t, c.Ready(ctx))
		} else {
			failedAt := time.Now()
			for c.Offset() == 0 {
				require.Less(t, time.Since(failedAt), 15*time.Second, "not measured again within RetryFailed")
				c.Now()
				time.Sleep(50 * time.Millisecond)
			}
		}
		require.InDelta(t, float64(-5*time.Second), float64(c.Offset()), float64(300*time.Millisecond), "a measure is off by up to half its round trip")
		require.NoError(t, c.Ready(ctx))
	}
}

// steppedHost is a host whose wall clock is stepped forward by step once run reaches
// stepAt, while the time run goes on evenly.
type steppedHost struct {
	mu                sync.Mutex
	base              time.Time
	run, step, stepAt time.Duration
}

func (h *steppedHost) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run >= h.stepAt {
		return h.base.Add(h.run + h.step)
	}
	return h.base.Add(h.run)
}

func (h *steppedHost) Elapsed(since time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := since.Sub(h.base)
	if at >= h.stepAt+h.step {
		at -= h.step
	}
	return h.run - at
}

func (h *steppedHost) advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.run += d
}

// clusterOf is a coordinator whose clock is the host's time run, ahead by lead.
type clusterOf struct {
	h    *steppedHost
	lead time.Duration
}

func (c clusterOf) Now(context.Context) (time.Time, string, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.base.Add(c.h.run + c.lead), "", nil
}

// A step of the host's wall clock between two measures (NTP stepping it 4 s, a VM
// resumed) leaves the cluster's time as it runs: it is told from the last measure and the
// time run since, not from the wall clock.
func TestHostClockStepMovesNothing(t *testing.T) {
	t.Parallel()
	h := &steppedHost{base: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), step: 4 * time.Second, stepAt: 5 * time.Second}
	c := clustertime.New(clusterOf{h: h, lead: time.Second}, h, nil)
	require.NoError(t, c.Ready(context.Background()))
	require.Equal(t, time.Second, c.Offset())
	require.Equal(t, h.base.Add(time.Second), c.Now())

	h.advance(10 * time.Second) // past the step
	require.Equal(t, h.base.Add(14*time.Second), h.Now(), "the host's wall clock stepped")
	require.Equal(t, h.base.Add(11*time.Second), c.Now(), "the cluster's time did not")
}

// suspendingHost is a host across a suspend (a laptop asleep, a VM saved and restored):
// its wall clock is right again on resume, while the time elapsed (the monotonic clock)
// did not run while it slept.
type suspendingHost struct {
	mu        sync.Mutex
	base      time.Time
	run       time.Duration // time elapsed, sleeps excluded
	slept     time.Duration
	runAtTime map[time.Time]time.Duration // the time elapsed at each instant Now returned
}

func (h *suspendingHost) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.base.Add(h.run + h.slept)
	h.runAtTime[t] = h.run
	return t
}

func (h *suspendingHost) Elapsed(since time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.run - h.runAtTime[since]
}

// trueTime is a coordinator whose clock ran while the host slept.
type trueTime struct{ h *suspendingHost }

func (c trueTime) Now(context.Context) (time.Time, string, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.base.Add(c.h.run + c.h.slept), "", nil
}

// After the host slept ten minutes, the time elapsed says little time passed and the wall
// clock says ten minutes did: the cluster's time is the earlier until a measure, started
// at once, tells, and writes are stamped as unmeasured meanwhile.
func TestHostSleepMeasuresAgainAtOnce(t *testing.T) {
	t.Parallel()
	h := &suspendingHost{base: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), runAtTime: map[time.Time]time.Duration{}}
	c := clustertime.New(trueTime{h}, h, nil)
	require.NoError(t, c.Ready(context.Background()))
	truth, _, _ := trueTime{h}.Now(context.Background())
	require.Equal(t, truth, c.Now())

	h.mu.Lock()
	h.slept += 10 * time.Minute
	h.run += time.Second
	h.mu.Unlock()
	truth, _, _ = trueTime{h}.Now(context.Background())
	require.False(t, c.Now().After(truth), "never early")
	require.Eventually(t, func() bool { return c.Now().Equal(truth) }, 10*time.Second, time.Millisecond,
		"measured again at once, not a minute of running later")
	require.Equal(t, truth.Add(-clustertime.WriteLag).UnixMicro(), c.Stamp(truth), "measured: stamped without the unmeasured margin")
}

// nodesOf is a cluster of nodes whose clocks lead the host's time run by their leads: each
// read is answered by the next node in turn, as a round-robin policy sends them.
type nodesOf struct {
	h     *steppedHost
	mu    sync.Mutex
	leads map[string]time.Duration
	turn  int
}

func (c *nodesOf) Now(context.Context) (time.Time, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := slices.Sorted(maps.Keys(c.leads))
	node := names[c.turn%len(names)]
	c.turn++
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.base.Add(c.h.run + c.leads[node]), node, nil
}

// Nodes whose clocks disagree: the cluster's time is the earliest node's clock, so due
// times are judged early by none; plain writes are stamped behind it, deletes past the
// latest, and the disagreement is reported. A node that stops answering stops counting
// after Forget.
func TestNodesDisagreeEarliestCounts(t *testing.T) {
	t.Parallel()
	h := &steppedHost{base: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), stepAt: time.Duration(1 << 62)}
	nodes := &nodesOf{h: h, leads: map[string]time.Duration{"a": 0, "b": -3 * time.Second, "c": 2 * time.Second}}
	warned := testlog.New(slog.LevelWarn)
	c := clustertime.New(nodes, h, warned.Logger())
	require.NoError(t, c.Ready(context.Background()))

	require.Equal(t, -3*time.Second, c.Offset(), "the earliest node's clock")
	require.Equal(t, 5*time.Second, c.Spread())
	require.Equal(t, h.base.Add(-3*time.Second), c.Now())
	require.Equal(t, h.base.Add(-3*time.Second-clustertime.WriteLag).UnixMicro(), c.Stamp(h.Now()),
		"plain writes lose to deletes any node stamps")
	require.Equal(t, h.base.Add(2*time.Second+clustertime.WriteLag).UnixMicro(), c.DeleteStamp(),
		"deletes win over writes any node stamps")
	require.Positive(t, warned.Count("nodes' clocks disagree"), "the disagreement is reported")

	nodes.mu.Lock()
	delete(nodes.leads, "b")
	nodes.mu.Unlock()
	h.advance(clustertime.Refresh)
	_, err := c.Measure(context.Background())
	require.NoError(t, err)
	require.Equal(t, -3*time.Second, c.Offset(), "a node that did not answer still counts")

	h.advance(clustertime.Forget)
	_, err = c.Measure(context.Background())
	require.NoError(t, err)
	require.Zero(t, c.Offset(), "a node silent for Forget no longer counts")
	require.Equal(t, 2*time.Second, c.Spread())
	require.Equal(t, h.base.Add(clustertime.Refresh+clustertime.Forget), c.Now())
}

// slowCoordinator answers with the host's time run, read halfway through a round trip of
// rtt.
type slowCoordinator struct {
	h   *steppedHost
	rtt time.Duration
}

func (c slowCoordinator) Now(context.Context) (time.Time, string, error) {
	c.h.advance(c.rtt / 2)
	at := c.h.base.Add(c.h.run)
	c.h.advance(c.rtt / 2)
	return at, "", nil
}

// The cluster's time may read ahead by half the round trip of the readings its last
// measure kept, and by Unmeasured before any measure: the bound the simulator's oracle
// holds deliveries to.
func TestUncertaintyIsHalfTheRoundTrip(t *testing.T) {
	t.Parallel()
	h := &steppedHost{base: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), stepAt: time.Duration(1 << 62)}
	c := clustertime.New(slowCoordinator{h: h, rtt: 40 * time.Millisecond}, h, nil)
	require.Equal(t, clustertime.Unmeasured, c.Uncertainty())
	require.NoError(t, c.Ready(context.Background()))
	require.Equal(t, 20*time.Millisecond, c.Uncertainty())
	require.Equal(t, h.base.Add(h.run), c.Now(), "read halfway, the reading is exact here")
}
