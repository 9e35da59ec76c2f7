package shardqgocqlv2_test

import (
	"context"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// repeat gives the first node of the policy it wraps three times over, so that a retry
// on the next node is seen on a cluster of one.
type repeat struct{ gocql.HostSelectionPolicy }

func (r repeat) Pick(q gocql.ExecutableStatement) gocql.NextHost {
	next := r.HostSelectionPolicy.Pick(q)
	var h gocql.SelectedHost
	n := 0
	return func() gocql.SelectedHost {
		if h == nil {
			h = next()
		}
		if h == nil || n == 3 {
			return nil
		}
		n++
		return h
	}
}

// attemptsSeen counts the attempts of each statement, and of each batch by its first.
type attemptsSeen struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attemptsSeen) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[q.Statement]++
}

func (a *attemptsSeen) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[b.Statements[0]]++
}

func (a *attemptsSeen) of(stmt string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[stmt]
}

// v2 retries only requests marked idempotent, v1 whatever the retry policy allows: the
// adapter marks them so that the driver sends the same ones again as on v1. Plain
// statements, plain batches and SERIAL reads (by serialRetries on a session the host
// policy does not route) are sent again; lightweight transactions and schema changes
// never.
func TestRetries(t *testing.T) {
	t.Parallel()
	seen := &attemptsSeen{n: map[string]int{}}
	c := gocql.NewCluster(cassandratest.Hosts(t)...)
	c.Keyspace = cassandratest.Keyspace(t)
	c.Timeout = 30 * time.Second
	c.PoolConfig.HostSelectionPolicy = repeat{gocql.RoundRobinHostPolicy()}
	c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 2}
	c.QueryObserver, c.BatchObserver = seen, seen
	s, err := c.CreateSession()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	d := shardqgocqlv2.New(s).Session()
	ctx := t.Context()
	require.NoError(t, d.Exec(ctx, driver.Statement{CQL: `CREATE TABLE IF NOT EXISTS kv (k text PRIMARY KEY, v int)`, Mode: driver.Once}))

	// Each statement is refused (no column nope), which the retry policies send again as
	// any error.
	const (
		write    = `INSERT INTO kv (k, nope) VALUES (?, ?)`
		read     = `SELECT nope FROM kv WHERE k = ?`
		once     = `UPDATE kv SET nope = ? WHERE k = ?`
		serial   = `SELECT nope, v FROM kv WHERE k = ?`
		cas      = `UPDATE kv SET v = ? WHERE k = ? IF nope = ?`
		batch    = `INSERT INTO kv (k, v, nope) VALUES (?, ?, ?)`
		casBatch = `UPDATE kv SET v = ? WHERE k = ? IF v = ? AND nope = ?`
	)
	refused := func(err error) {
		t.Helper()
		require.True(t, driver.Refused(err), "%v", err)
	}
	refused(d.Exec(ctx, driver.Statement{CQL: write, Args: []any{"a", 1}}))
	refused(driver.Scan(ctx, d, driver.Statement{CQL: read, Args: []any{"a"}}, new(int)))
	refused(d.Exec(ctx, driver.Statement{CQL: once, Args: []any{1, "a"}, Mode: driver.Once}))
	refused(driver.Scan(ctx, d, driver.Statement{CQL: serial, Args: []any{"a"}, Mode: driver.Serial}, new(int), new(int)))
	_, err = d.ExecCAS(ctx, driver.Statement{CQL: cas, Args: []any{1, "a", 1}}, nil)
	refused(err)
	b := &driver.Batch{}
	b.Add(batch, "a", 1, 1)
	refused(d.ExecBatch(ctx, b))
	b = &driver.Batch{Logged: true}
	b.Add(casBatch, 1, "a", 1, 1)
	_, err = d.ExecBatchCAS(ctx, b, nil)
	refused(err)

	for stmt, want := range map[string]int{write: 3, read: 3, once: 1, serial: 3, cas: 1, batch: 3, casBatch: 1} {
		require.Equal(t, want, seen.of(stmt), "attempts of %s", stmt)
	}
}
