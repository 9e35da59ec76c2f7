package shardqgocqlv2

import (
	"context"
	"errors"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
)

// attempts is a query that was sent this many times, for serialRetries.
type attempts int

func (a attempts) Attempts() int                   { return int(a) }
func (attempts) SetConsistency(gocql.Consistency)  {}
func (attempts) GetConsistency() gocql.Consistency { return gocql.Serial }
func (attempts) Context() context.Context          { return context.Background() }

// A read at SERIAL that timed out, on the client or the node, is sent twice more at most
// to the same node, one that failed otherwise to the next; a caller's deadline ends it.
func TestSerialRetry(t *testing.T) {
	t.Parallel()
	p := serialRetries
	for _, err := range []error{gocql.ErrTimeoutNoResponse, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrWriteTimeout{}} {
		require.Equal(t, gocql.Retry, p.GetRetryType(err), "%T", err)
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled} {
		require.Equal(t, gocql.Rethrow, p.GetRetryType(err), "%T", err)
	}
	require.Equal(t, gocql.RetryNextHost, p.GetRetryType(&gocql.RequestErrUnavailable{}))
	require.Equal(t, []bool{true, true, false}, []bool{p.Attempt(attempts(1)), p.Attempt(attempts(2)), p.Attempt(attempts(3))})
	require.False(t, noRetry.Attempt(attempts(1)), "Once is never sent again")
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
		require.True(t, timedOut(err), "%v", err)
	}
	for _, err := range []error{nil, gocql.ErrConnectionClosed, &gocql.RequestErrUnavailable{}, context.Canceled, errors.New("boom")} {
		require.False(t, timedOut(err), "%v", err)
	}
}
