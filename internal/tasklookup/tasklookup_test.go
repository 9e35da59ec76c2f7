package tasklookup_test

import (
	"context"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// movingIndex runs move once, right after the first read of an entry returns: a
// consumer's lease of the task lands between a lookup's read of the entry and its reads
// of the rows the entry names.
type movingIndex struct {
	store.Index
	move func()
}

func (x *movingIndex) Read(ctx context.Context, id uuid.UUID) (taskindex.Entry, int64, error) {
	e, stamp, err := x.Index.Read(ctx, id)
	if x.move != nil {
		move := x.move
		x.move = nil
		move()
	}
	return e, stamp, err
}

type movingStore struct {
	store.Store
	index *movingIndex
}

func (s movingStore) Index() store.Index { return s.index }

// A task moved between the read of its entry and the reads of its rows (the keeper of a
// series asking about an occurrence whose expired marker a consumer leases again) is
// found where it went, not reported gone: a keeper told "gone" moves the series on while
// the occurrence runs.
func TestLocateFollowsAMoveDuringTheLookup(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cluster, err := memstore.New(memstore.Config{Now: clock})
	require.NoError(t, err)
	st := cluster.Client(memstore.ClientConfig{Clock: clock})

	id := taskid.New(now.Add(-time.Minute), "q")
	row := func(at time.Time, attempt int, token int64) taskrow.Row {
		return taskrow.Row{Key: "q:0:0", ID: gocql.UUID(shard.NewID(at)), TaskID: gocql.UUID(id), DueAt: now.Add(-time.Minute),
			Timeout: 10 * time.Second, Attempt: attempt, Token: token}
	}
	loc := func(r taskrow.Row) taskindex.Loc { return taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID} }
	lease := func(from, to taskrow.Row, prev taskindex.State) {
		w := taskindex.Write{Entry: taskindex.Entry{TaskID: id, Queue: "q", State: taskindex.InFlight, Row: loc(to),
			PrevState: prev, Prev: loc(from)}, Stamp: taskindex.Stamp(id, to.Token, 0), TTL: time.Hour}
		_, err := st.Index().Write(ctx, []taskindex.Write{w}, 1)
		require.NoError(t, err)
		require.NoError(t, st.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: to, Stamp: now.UnixMicro()}}))
		require.NoError(t, st.Tasks().Write(ctx, []store.Mutation{{Op: store.Delete, Row: from, Stamp: now.UnixMicro() + 1}}))
		now = now.Add(time.Millisecond)
	}
	pending := row(now.Add(-time.Minute), 0, 0)
	require.NoError(t, st.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: pending, Stamp: now.UnixMicro()}}))
	now = now.Add(time.Millisecond)
	first := row(now.Add(-time.Second), 1, 1) // its marker, expired
	lease(pending, first, taskindex.Scheduled)
	second := row(now.Add(10*time.Second), 2, 2)

	x := &movingIndex{Index: st.Index(), move: func() { lease(first, second, taskindex.InFlight) }}
	fi := tasklookup.New(movingStore{Store: st, index: x}, shardq.SystemClock{}, func(context.Context, string) (shardq.QueueConfig, error) {
		return shardq.QueueConfig{Name: "q"}, nil
	})
	f, err := fi.Locate(ctx, id)
	require.NoError(t, err)
	require.Equal(t, taskindex.InFlight, f.State)
	require.Equal(t, second.ID, f.Row.ID)
}
