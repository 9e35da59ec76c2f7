package shardqgocqlv2_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/drivertest"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// session opens a v2 session on a fresh keyspace, made and dropped through the v1
// helpers of the tests of the main module. Its timeout is that of sessions that change
// the schema: the conformance suite creates a table per case.
func session(t *testing.T) *gocql.Session {
	t.Helper()
	c := shardqgocqlv2.RecommendedCluster(gocql.NewCluster(cassandratest.Hosts(t)...))
	c.Keyspace = cassandratest.Keyspace(t)
	c.Timeout = 30 * time.Second
	s, err := c.CreateSession()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// The adapter meets the expectations every driver's adapter is held to.
func TestConformance(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, func(t *testing.T) driver.Session { return shardqgocqlv2.New(session(t)).Session() })
}

// RecommendedCluster makes cqlcluster's settings, and wraps the host selection policy
// once however often it is called.
func TestRecommendedCluster(t *testing.T) {
	t.Parallel()
	c := shardqgocqlv2.RecommendedCluster(gocql.NewCluster("127.0.0.1"))
	require.Equal(t, time.Second, c.Timeout)
	require.Equal(t, 5*time.Second, c.ConnectTimeout)
	require.Equal(t, 10*time.Second, c.ReconnectInterval)
	require.Equal(t, &gocql.SimpleRetryPolicy{NumRetries: 2}, c.RetryPolicy)
	p := c.PoolConfig.HostSelectionPolicy
	require.NotNil(t, p)
	require.Same(t, p, shardqgocqlv2.RecommendedCluster(c).PoolConfig.HostSelectionPolicy)
}

// attempts is a query that was sent this many times, for SerialRetry.
type attempts int

func (a attempts) Attempts() int                   { return int(a) }
func (attempts) SetConsistency(gocql.Consistency)  {}
func (attempts) GetConsistency() gocql.Consistency { return gocql.Serial }
func (attempts) Context() context.Context          { return context.Background() }

// A read at SERIAL that timed out, on the client or the node, is sent twice more at most
// to the same node, one that failed otherwise to the next; a caller's deadline ends it.
func TestSerialRetry(t *testing.T) {
	t.Parallel()
	p := shardqgocqlv2.SerialRetry
	for _, err := range []error{gocql.ErrTimeoutNoResponse, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrWriteTimeout{}} {
		require.Equal(t, gocql.Retry, p.GetRetryType(err), "%T", err)
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled} {
		require.Equal(t, gocql.Rethrow, p.GetRetryType(err), "%T", err)
	}
	require.Equal(t, gocql.RetryNextHost, p.GetRetryType(&gocql.RequestErrUnavailable{}))
	require.Equal(t, []bool{true, true, false}, []bool{p.Attempt(attempts(1)), p.Attempt(attempts(2)), p.Attempt(attempts(3))})
	require.False(t, shardqgocqlv2.NoRetry.Attempt(attempts(1)), "Once is never sent again")
}

// timeout is a net.Error that timed out.
type timeout struct{}

func (timeout) Error() string   { return "dial: timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }

// The errors whose request's outcome is unknown are the driver's timeouts, the node's
// and the network's.
func TestTimedOut(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		gocql.ErrTimeoutNoResponse, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrWriteTimeout{},
		timeout{}, context.DeadlineExceeded, errors.New("read tcp: i/o timeout"),
		errors.New("gocql: no response to connection startup within timeout"),
		driver.NewError(0, true, "no response"),
	} {
		require.True(t, shardqgocqlv2.TimedOut(err), "%v", err)
	}
	for _, err := range []error{nil, gocql.ErrConnectionClosed, &gocql.RequestErrUnavailable{}, context.Canceled, errors.New("boom")} {
		require.False(t, shardqgocqlv2.TimedOut(err), "%v", err)
	}
}
