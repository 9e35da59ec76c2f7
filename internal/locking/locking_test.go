package locking_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/store"
)

// A batch fenced by a lease leaves its receipt exactly when it applies, so Settle tells
// an applied batch from one that did not apply even after other holders took the lock and
// ran batches of their own in between: what the lock row shows then belongs to them.
func TestSettleReadsTheReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.Of(gocqlv1.New(cassandratest.SchemaSession(t)))
	l, err := locking.New(st.Locks(), locking.Config{})
	require.NoError(t, err)
	const key = "q:0:0"
	fenced := func(le *locking.Lock) bool {
		applied, err := st.Tasks().Apply(ctx, []store.Mutation{{Op: store.Release, Lock: le.Ref()}})
		require.NoError(t, err)
		return applied
	}

	applied, err := l.Acquire(ctx, key)
	require.NoError(t, err)
	require.True(t, fenced(applied))
	never, err := l.Acquire(ctx, key)
	require.NoError(t, err)
	require.NoError(t, never.Release(ctx)) // as if its batch was lost before it ran
	late, err := l.Acquire(ctx, key)
	require.NoError(t, err)
	waitExpired(t, late)
	other, err := l.Acquire(ctx, key)
	require.NoError(t, err)
	require.False(t, fenced(late), "a batch of an expired lease does not apply")
	require.True(t, fenced(other))

	for _, c := range []struct {
		name string
		le   *locking.Lock
		want bool
	}{{"applied", applied, true}, {"never ran", never, false}, {"expired", late, false}, {"last", other, true}} {
		got, err := c.le.Settle(ctx)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, c.name)
	}
	held, err := other.Held(ctx)
	require.NoError(t, err)
	require.False(t, held, "settling leaves the lock free")
}

// waitExpired waits for the server-side TTL to end le: it polls the lock, never sleeps blindly.
func waitExpired(t *testing.T, le *locking.Lock) {
	t.Helper()
	require.Eventually(t, func() bool {
		held, err := le.Held(context.Background())
		return err == nil && !held
	}, 10*time.Second, 50*time.Millisecond)
}
