package lwt_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/lwt"
)

// A conditional batch that does not apply reports false, not an error: Cassandra answers
// with the rows' current values, which Batch must read past. Taken for an error, every
// swap that lost its lock went down the unknown-outcome path.
func TestBatchNotApplied(t *testing.T) {
	t.Parallel()
	s := cassandratest.DDLSession(t)
	require.NoError(t, s.Query(`CREATE TABLE kv (k text, c int, v int, PRIMARY KEY (k, c))`).Exec())
	require.NoError(t, s.Query(`INSERT INTO kv (k, c, v) VALUES ('a', 1, 1)`).Exec())
	batch := func(want int) *gocql.Batch {
		b := s.NewBatch(gocql.LoggedBatch)
		b.Query(`UPDATE kv SET v = 2 WHERE k = 'a' AND c = 1 IF v = ?`, want)
		b.Query(`DELETE FROM kv WHERE k = 'a' AND c = 2 IF EXISTS`)
		return b
	}
	applied, err := lwt.Batch(s, batch(7))
	require.NoError(t, err)
	require.False(t, applied)

	b := s.NewBatch(gocql.LoggedBatch)
	b.Query(`UPDATE kv SET v = 2 WHERE k = 'a' AND c = 1 IF v = 1`)
	applied, err = lwt.Batch(s, b)
	require.NoError(t, err)
	require.True(t, applied)
}

// Apply returns a definite failure as it is, and hands an unknown one to settle.
func TestApplySettlesOnlyUnknownOutcomes(t *testing.T) {
	t.Parallel()
	settled := 0
	settle := func(context.Context, error) (bool, error) { settled++; return true, nil }
	unavailable := requestError(gocql.ErrCodeUnavailable)
	_, err := lwt.Apply(context.Background(), func(context.Context) (bool, error) { return false, unavailable }, settle)
	require.ErrorIs(t, err, unavailable)
	require.Zero(t, settled)

	timeout := errors.New("no response")
	applied, err := lwt.Apply(context.Background(), func(context.Context) (bool, error) { return false, timeout }, settle)
	require.NoError(t, err)
	require.True(t, applied)
	require.Equal(t, 1, settled)
}

// A settle that fails leaves the outcome unknown even when what failed it was a refusal:
// the write it settles may have applied. Taken as definite, a swap's markers were dropped
// after its rows were deleted.
func TestFailedSettleIsNotDefinite(t *testing.T) {
	t.Parallel()
	overloaded := requestError(gocql.ErrCodeOverloaded)
	require.True(t, lwt.Definite(overloaded))
	_, err := lwt.Apply(context.Background(),
		func(context.Context) (bool, error) { return false, gocql.ErrTimeoutNoResponse },
		func(_ context.Context, cause error) (bool, error) {
			return false, fmt.Errorf("%w: %w (releasing: %w)", lwt.ErrOutcomeUnknown, cause, overloaded)
		})
	require.ErrorIs(t, err, lwt.ErrOutcomeUnknown)
	require.ErrorIs(t, err, overloaded)
	require.False(t, lwt.Definite(err))
}

// requestError is a coordinator's error answer with a code.
type requestError int

func (e requestError) Code() int       { return int(e) }
func (e requestError) Message() string { return "test" }
func (e requestError) Error() string   { return fmt.Sprintf("test: error code %#x", int(e)) }

// Settling outlives the caller's cancellation, for ResolveTimeout, or until the time a
// caller that must be done by then set with SettleBy.
func TestResolveContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rctx, rcancel := lwt.ResolveContext(ctx)
	defer rcancel()
	require.NoError(t, rctx.Err(), "a cancelled caller still settles")
	d, ok := rctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(lwt.ResolveTimeout), d, time.Second)

	by := time.Now().Add(time.Second)
	rctx, rcancel = lwt.ResolveContext(lwt.SettleBy(ctx, by))
	defer rcancel()
	d, _ = rctx.Deadline()
	require.Equal(t, by, d)

	later := time.Now().Add(time.Hour)
	rctx, rcancel = lwt.ResolveContext(lwt.SettleBy(ctx, later))
	defer rcancel()
	d, _ = rctx.Deadline()
	require.True(t, d.Before(later), "ResolveTimeout still bounds it")
}

// attempts is a query that was sent this many times, for SerialRetry.
type attempts int

func (a attempts) Attempts() int                   { return int(a) }
func (attempts) SetConsistency(gocql.Consistency)  {}
func (attempts) GetConsistency() gocql.Consistency { return lwt.Serial }
func (attempts) Context() context.Context          { return context.Background() }

// A read at SERIAL that timed out, on the client or the node, is sent twice more at most
// to the same node, one that failed otherwise to the next; a caller's deadline ends it.
func TestSerialRetry(t *testing.T) {
	t.Parallel()
	p := lwt.SerialRetry
	for _, err := range []error{gocql.ErrTimeoutNoResponse, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrWriteTimeout{}} {
		require.Equal(t, gocql.Retry, p.GetRetryType(err), "%T", err)
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled} {
		require.Equal(t, gocql.Rethrow, p.GetRetryType(err), "%T", err)
	}
	require.Equal(t, gocql.RetryNextHost, p.GetRetryType(&gocql.RequestErrUnavailable{}))
	require.Equal(t, []bool{true, true, false}, []bool{p.Attempt(attempts(1)), p.Attempt(attempts(2)), p.Attempt(attempts(3))})
}
