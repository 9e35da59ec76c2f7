package sessionstate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Parts made on one driver share one State; another driver, on another keyspace, has its
// own, so queues of the same name in the two do not share settings or wake-ups.
func TestOneStatePerDriver(t *testing.T) {
	t.Parallel()
	a, b := cassandratest.Driver(cassandratest.SchemaSession(t)), cassandratest.Driver(cassandratest.SchemaSession(t))
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

// A driver's clock is its State's unless a part brings a cluster clock of its own.
func TestClusterFor(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	st := sessionstate.For(cassandratest.Driver(s), nil)
	require.Same(t, st.Cluster, st.ClusterFor(nil))
	require.Same(t, st.Cluster, st.ClusterFor(shardqtype.SystemClock{}))
	own := clustertime.New(store.Of(gocqlv1.New(s)), skewed{}, nil)
	require.Same(t, own, st.ClusterFor(own))
}

type skewed struct{}

func (skewed) Now() time.Time { return time.Now().Add(3 * time.Second) }

// A driver bound to a State on another store (the simulator's) has the public calls
// that keep no state act on that store too: creating, loading, pausing and resuming a
// queue.
func TestBoundDriverActsOnItsStore(t *testing.T) {
	t.Parallel()
	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	tables := cluster.Client(memstore.ClientConfig{Clock: time.Now})
	session := driver.New(nil) // no session: any request through it would panic
	st := sessionstate.New(tables, nil, nil)
	sessionstate.Bind(session, st)
	require.Same(t, st, sessionstate.For(session, nil))
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, session, shardqtype.QueueConfig{Name: "q"})
	require.NoError(t, err)
	loaded, err := shardq.LoadQueue(ctx, session, "q")
	require.NoError(t, err)
	require.Equal(t, q, loaded)
	require.NoError(t, shardq.PauseQueue(ctx, session, "q"))
	status, err := tables.Queues().Status(ctx, "q", false)
	require.NoError(t, err)
	require.True(t, status.Paused)
	require.NoError(t, shardq.ResumeQueue(ctx, session, "q"))
}

// Every task row and marker a State's store writes is sent only after its signal cell
// was touched, once per cell: a cell that shows no touch proves its partition holds no row
// of its bucket (signal.Announcer). A touch that fails keeps the rows unwritten, with
// signal.ErrNotAnnounced, and is made again by the next write.
func TestWritesAnnounceTheirCells(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	cluster, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	require.NoError(t, err)
	var mu sync.Mutex
	var ops []string // the touches and writes of task rows, in order
	refuse := false
	tables := cluster.Client(memstore.ClientConfig{Clock: func() time.Time { return now },
		Gate: func(_ context.Context, r memstore.Request) (memstore.Fault, error) {
			mu.Lock()
			defer mu.Unlock()
			switch r.Op {
			case "Signals.Touch":
				ops = append(ops, r.Op)
				if refuse {
					return memstore.Unavailable, nil
				}
			case "Tasks.Write", "Leasing.WriteMarkers":
				ops = append(ops, r.Op)
			}
			return memstore.None, nil
		}})
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		got := ops
		ops = nil
		return got
	}
	st := sessionstate.New(tables, nil, nil)
	session := driver.New(nil) // no session: any request through it would panic
	sessionstate.Bind(session, st)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, session, shardqtype.QueueConfig{Name: "q", ShardCount: 1})
	require.NoError(t, err)
	l := q.Layout()
	row := func(at time.Time) taskrow.Row {
		id := shard.NewID(at)
		return taskrow.Row{Key: l.Key(l.Bucket(at), 0), ID: id, TaskID: id, DueAt: at, Timeout: time.Minute}
	}
	write := func(r taskrow.Row) error {
		return st.Store.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: r, Stamp: now.UnixMicro()}})
	}
	cells := func(at time.Time) map[signal.Cell]uuid.UUID {
		got, err := tables.Signals().Cells(ctx, l.Ring(), l.Bucket(at), l.Bucket(at))
		require.NoError(t, err)
		return got
	}

	taken()
	require.NoError(t, write(row(now)))
	require.Equal(t, []string{"Signals.Touch", "Tasks.Write"}, taken(), "the touch, then the write")
	require.Len(t, cells(now), 1)
	require.NoError(t, write(row(now.Add(time.Millisecond))))
	require.Equal(t, []string{"Tasks.Write"}, taken(), "a cell touched once is not touched again")

	later := now.Add(l.BucketDuration)
	mu.Lock()
	refuse = true
	mu.Unlock()
	err = write(row(later))
	require.ErrorIs(t, err, signal.ErrNotAnnounced)
	require.Empty(t, cells(later))
	_, found, err := tables.Tasks().Read(ctx, row(later).Key, 0, row(later).ID)
	require.NoError(t, err)
	require.False(t, found, "not written")
	mu.Lock()
	refuse = false
	mu.Unlock()
	r := row(later)
	require.NoError(t, write(r))
	require.Len(t, cells(later), 1, "touched by the next write")
	_, found, err = tables.Tasks().Read(ctx, r.Key, 0, r.ID)
	require.NoError(t, err)
	require.True(t, found)

	// Markers too, and a row of a ring the store cannot place is refused.
	marker := row(now.Add(3 * l.BucketDuration))
	taken()
	require.NoError(t, st.Store.Leasing().WriteMarkers(ctx, []taskrow.Row{marker}, now.UnixMicro(), 1))
	require.Equal(t, []string{"Signals.Touch", "Leasing.WriteMarkers"}, taken())
	require.Len(t, cells(now.Add(3*l.BucketDuration)), 1)
	stray := row(now)
	stray.Key = shard.FormatKey("q~7", 0, 0)
	require.ErrorContains(t, write(stray), "not in its history")
}
