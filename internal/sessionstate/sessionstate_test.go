package sessionstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shardqtype"
)

// Parts made on one session share one State; another session, bound to another keyspace,
// has its own, so queues of the same name in the two do not share settings or wake-ups.
func TestOneStatePerSession(t *testing.T) {
	t.Parallel()
	a, b := cassandratest.SchemaSession(t), cassandratest.SchemaSession(t)
	sa, sb := sessionstate.For(a, nil), sessionstate.For(b, nil)
	require.Same(t, sa, sessionstate.For(a, nil))
	require.NotSame(t, sa, sb)
	require.NotSame(t, sa.Bus, sb.Bus)
	require.NotSame(t, sa.Signals, sb.Signals)

	ctx := context.Background()
	_, err := shardq.CreateQueue(ctx, a, shardqtype.QueueConfig{Name: "q", ShardCount: 2})
	require.NoError(t, err)
	_, err = shardq.CreateQueue(ctx, b, shardqtype.QueueConfig{Name: "q", ShardCount: 3})
	require.NoError(t, err)
	qa, err := sa.Queue(ctx, "q")
	require.NoError(t, err)
	qb, err := sb.Queue(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, 2, qa.ShardCount)
	require.Equal(t, 3, qb.ShardCount)

	_, err = sa.Queue(ctx, "nosuch")
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
	_, err = shardq.CreateQueue(ctx, a, shardqtype.QueueConfig{Name: "nosuch"})
	require.NoError(t, err)
	_, err = sa.Queue(ctx, "nosuch")
	require.NoError(t, err, "a queue not found is not cached: it may be created next")
}

// A session's clock is its State's unless a part brings a cluster clock of its own.
func TestClusterFor(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	st := sessionstate.For(s, nil)
	require.Same(t, st.Cluster, st.ClusterFor(nil))
	require.Same(t, st.Cluster, st.ClusterFor(shardqtype.SystemClock{}))
	own := clustertime.New(store.Cassandra(s), skewed{}, nil)
	require.Same(t, own, st.ClusterFor(own))
}

type skewed struct{}

func (skewed) Now() time.Time { return time.Now().Add(3 * time.Second) }

// A session bound to a State on another store (the simulator's) has the public calls
// that keep no state act on that store too: creating, loading, pausing and resuming a
// queue. Unbound, the session is its Cassandra tables again.
func TestBoundSessionActsOnItsStore(t *testing.T) {
	t.Parallel()
	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	tables := cluster.Client(memstore.ClientConfig{Clock: time.Now})
	session := new(gocql.Session) // never connected: any request through it would panic
	unbind := sessionstate.Bind(session, sessionstate.New(tables, nil, nil))
	require.Same(t, tables, store.For(session))
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, session, shardqtype.QueueConfig{Name: "q"})
	require.NoError(t, err)
	loaded, err := shardq.LoadQueue(ctx, session, "q")
	require.NoError(t, err)
	require.Equal(t, q, loaded)
	require.NoError(t, shardq.PauseQueue(ctx, session, "q"))
	st, err := tables.Queues().Status(ctx, "q", false)
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.NoError(t, shardq.ResumeQueue(ctx, session, "q"))
	unbind()
	require.Equal(t, store.Cassandra(session), store.For(session))
}
