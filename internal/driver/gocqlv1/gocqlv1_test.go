package gocqlv1_test

import (
	"context"
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
)

// A conditional batch that does not apply reports false, not an error: Cassandra answers
// with the rows' current values, which ExecBatchCAS must read past. Taken for an error, every
// swap that lost its lock went down the unknown-outcome path.
func TestBatchNotApplied(t *testing.T) {
	t.Parallel()
	s := cassandratest.DDLSession(t)
	require.NoError(t, s.Query(`CREATE TABLE kv (k text, c int, v int, PRIMARY KEY (k, c))`).Exec())
	require.NoError(t, s.Query(`INSERT INTO kv (k, c, v) VALUES ('a', 1, 1)`).Exec())
	ctx := context.Background()
	d := gocqlv1.New(s)
	b := &driver.Batch{Logged: true}
	b.Add(`UPDATE kv SET v = 2 WHERE k = 'a' AND c = 1 IF v = ?`, 7)
	b.Add(`DELETE FROM kv WHERE k = 'a' AND c = 2 IF EXISTS`)
	row := map[string]any{}
	applied, err := d.ExecBatchCAS(ctx, b, row)
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, 1, row["v"], "the row's current value")

	b = &driver.Batch{Logged: true}
	b.Add(`UPDATE kv SET v = 2 WHERE k = 'a' AND c = 1 IF v = 1`)
	applied, err = d.ExecBatchCAS(ctx, b, nil)
	require.NoError(t, err)
	require.True(t, applied)
}

// attempts is a query that was sent this many times, for SerialRetry.
type attempts int

func (a attempts) Attempts() int                   { return int(a) }
func (attempts) SetConsistency(gocql.Consistency)  {}
func (attempts) GetConsistency() gocql.Consistency { return gocql.Consistency(gocql.Serial) }
func (attempts) Context() context.Context          { return context.Background() }

// A read at SERIAL that timed out, on the client or the node, is sent twice more at most
// to the same node, one that failed otherwise to the next; a caller's deadline ends it.
func TestSerialRetry(t *testing.T) {
	t.Parallel()
	p := gocqlv1.SerialRetry
	for _, err := range []error{gocql.ErrTimeoutNoResponse, &gocql.RequestErrReadTimeout{}, &gocql.RequestErrWriteTimeout{}} {
		require.Equal(t, gocql.Retry, p.GetRetryType(err), "%T", err)
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled} {
		require.Equal(t, gocql.Rethrow, p.GetRetryType(err), "%T", err)
	}
	require.Equal(t, gocql.RetryNextHost, p.GetRetryType(&gocql.RequestErrUnavailable{}))
	require.Equal(t, []bool{true, true, false}, []bool{p.Attempt(attempts(1)), p.Attempt(attempts(2)), p.Attempt(attempts(3))})
}
