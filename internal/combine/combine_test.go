package combine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
)

// batches counts the batches a session sent and the statements in them.
type batches struct{ n, stmts atomic.Int64 }

func (b *batches) ObserveBatch(_ context.Context, o gocql.ObservedBatch) {
	b.n.Add(1)
	b.stmts.Add(int64(len(o.Statements)))
}

func setup(t *testing.T) (*Writer[stmt], *gocql.Session, *batches) {
	t.Helper()
	seen := &batches{}
	// The admin timeout: a node busy with the other packages' tests can take seconds
	// over the schema change.
	s := cassandratest.SessionFor(t, cassandratest.Keyspace(t), func(c *gocql.ClusterConfig) {
		c.BatchObserver = seen
		c.Timeout = cqlcluster.AdminTimeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, s.Query(`CREATE TABLE kv (k text, c int, v text, PRIMARY KEY (k, c))`).WithContext(ctx).Exec())
	send := func(ctx context.Context, stmts []stmt) error {
		b := s.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
		for _, st := range stmts {
			b.Query(st.query, st.args...)
		}
		return s.ExecuteBatch(b)
	}
	return New(send, 10, 1000), s, seen
}

// stmt is one statement of a write.
type stmt struct {
	query string
	args  []any
}

func put(key string, cs ...int) []stmt {
	var out []stmt
	for _, c := range cs {
		out = append(out, stmt{`INSERT INTO kv (k, c, v) VALUES (?, ?, 'x')`, []any{key, c}})
	}
	return out
}

func rows(t *testing.T, s *gocql.Session, key string) []int {
	t.Helper()
	iter := s.Query(`SELECT c FROM kv WHERE k = ?`, key).Iter()
	var out []int
	for c := 0; iter.Scan(&c); {
		out = append(out, c)
	}
	require.NoError(t, iter.Close())
	return out
}

// hold marks key as having a write in flight, as the first of a burst of calls would,
// and returns the results of writes started meanwhile once they all wait.
func hold(t *testing.T, w *Writer[stmt], key string, writes ...[]stmt) []chan error {
	t.Helper()
	w.mu.Lock()
	w.parts[key] = nil
	w.mu.Unlock()
	var errs []chan error
	for _, stmts := range writes {
		ch := make(chan error, 1)
		errs = append(errs, ch)
		go func() { ch <- w.Write(context.Background(), key, stmts, 0) }()
	}
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.parts[key]) == len(writes)
	}, 10*time.Second, time.Millisecond, "every write waits behind the one in flight")
	return errs
}

func wait(t *testing.T, errs []chan error) {
	t.Helper()
	for _, ch := range errs {
		select {
		case err := <-ch:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("a write did not return")
		}
	}
}

// TestWaitingWritesGoTogether: writes that arrive while one to their partition is in
// flight go in one batch once it returns, within the bounds, and every row lands.
func TestWaitingWritesGoTogether(t *testing.T) {
	t.Parallel()
	w, s, seen := setup(t)
	errs := hold(t, w, "a", put("a", 1), put("a", 2, 3), put("a", 4))
	w.next("a")
	wait(t, errs)
	require.Equal(t, []int{1, 2, 3, 4}, rows(t, s, "a"))
	require.Equal(t, int64(1), seen.n.Load(), "three waiting writes, one batch")

	// Over maxRows (10) together: the first two fit, the third goes next.
	errs = hold(t, w, "b", put("b", 1, 2, 3, 4), put("b", 5, 6, 7, 8), put("b", 9, 10, 11))
	w.next("b")
	wait(t, errs)
	require.Len(t, rows(t, s, "b"), 11)
	require.Equal(t, int64(3), seen.n.Load(), "4+4 rows in one batch, 3 in the next")

	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.parts, "no partition is left marked busy")
}

// TestSparseAndLargeWritesGoAtOnce: a write to an idle partition, or one at half the
// bounds, is sent at once, even while others to its partition wait.
func TestSparseAndLargeWritesGoAtOnce(t *testing.T) {
	t.Parallel()
	w, s, seen := setup(t)
	ctx := context.Background()
	require.NoError(t, w.Write(ctx, "a", put("a", 1), 0))
	require.Equal(t, int64(1), seen.n.Load())

	w.mu.Lock()
	w.parts["b"] = nil
	w.mu.Unlock()
	require.NoError(t, w.Write(ctx, "b", put("b", 1, 2, 3, 4, 5), 0), "half of maxRows")
	require.NoError(t, w.Write(ctx, "b", put("b", 6), 500), "half of maxBytes")
	require.Equal(t, []int{1, 2, 3, 4, 5, 6}, rows(t, s, "b"))
	w.next("b")
}

// TestCancelledWaitIsWithdrawn: a write whose context ends while it waits returns the
// context's error and is never sent, while the others are.
func TestCancelledWaitIsWithdrawn(t *testing.T) {
	t.Parallel()
	w, s, seen := setup(t)
	errs := hold(t, w, "a", put("a", 1))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err = w.Write(ctx, "a", put("a", 2), 0)
	}()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.parts["a"]) == 2
	}, 10*time.Second, time.Millisecond)
	cancel()
	wg.Wait()
	require.ErrorIs(t, err, context.Canceled)
	w.next("a")
	wait(t, errs)
	require.Equal(t, []int{1}, rows(t, s, "a"), fmt.Sprintf("the withdrawn row is absent (%d batches)", seen.n.Load()))
}

// TestShortDeadlineDoesNotFailOthers: a merged batch goes by its callers' earliest
// deadline; when that deadline ends it, the other callers' writes are sent again under
// their own and land, and only the caller whose deadline passed sees the error.
func TestShortDeadlineDoesNotFailOthers(t *testing.T) {
	t.Parallel()
	w, s, _ := setup(t)
	errs := hold(t, w, "a", put("a", 1))
	short := &write[stmt]{stmts: put("a", 2), deadline: time.Now().Add(-time.Millisecond), done: make(chan error, 1)}
	w.mu.Lock()
	w.parts["a"] = append(w.parts["a"], short)
	w.mu.Unlock()
	w.next("a")
	wait(t, errs)
	select {
	case err := <-short.done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("the short write did not return")
	}
	require.Equal(t, []int{1}, rows(t, s, "a"))
}
