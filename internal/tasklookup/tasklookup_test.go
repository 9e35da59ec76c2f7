package tasklookup_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
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

// world is a queue on the real node and the moves a consumer makes of one task in it.
type world struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	q     shardqtype.QueueConfig
	id    uuid.UUID
	now   time.Time
	stamp int64
}

func newWorld(t *testing.T) *world {
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(context.Background(), cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 1, BucketCount: 10, BucketDuration: time.Minute})
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &world{t: t, ctx: context.Background(), st: store.Of(gocqlv1.New(s)), q: q,
		id: taskid.New(now.Add(-time.Minute), "q"), now: now, stamp: now.UnixMicro()}
}

// row is a copy of the task visible at at, delivered attempt times.
func (w *world) row(at time.Time, attempt int) taskrow.Row {
	lay := w.q.Layout()
	return taskrow.Row{Key: lay.Key(lay.Bucket(at), 0), ID: shard.NewID(at), TaskID: w.id,
		DueAt: w.now.Add(-time.Minute), Timeout: 10 * time.Second, Attempt: attempt, Token: int64(attempt)}
}

func (w *world) write(op store.Op, r taskrow.Row) {
	w.stamp++
	require.NoError(w.t, w.st.Tasks().Write(w.ctx, []store.Mutation{{Op: op, Row: r, Stamp: w.stamp}}))
}

// lease moves the task from from to to as a consumer's swap does: entry, new row, then
// the delete of the old one.
func (w *world) lease(from, to taskrow.Row, prev taskindex.State) {
	loc := func(r taskrow.Row) taskindex.Loc { return taskindex.Loc{Key: r.Key, Priority: r.Priority, ID: r.ID} }
	e := taskindex.Write{Entry: taskindex.Entry{TaskID: w.id, Queue: "q", State: taskindex.InFlight, Row: loc(to),
		PrevState: prev, Prev: loc(from)}, Stamp: taskindex.Stamp(w.id, to.Token, 0), TTL: time.Hour}
	_, err := w.st.Index().Write(w.ctx, []taskindex.Write{e}, 1)
	require.NoError(w.t, err)
	w.write(store.Insert, to)
	w.write(store.Delete, from)
}

// locate looks the task up while move runs right after the lookup's first read of the
// index entry, and returns what it found.
func (w *world) locate(move func()) tasklookup.Found {
	x := &movingIndex{Index: w.st.Index(), move: move}
	fi := tasklookup.New(movingStore{Store: w.st, index: x}, shardqtype.SystemClock{}, func(context.Context, string) (shardqtype.QueueConfig, error) {
		return w.q, nil
	})
	f, err := fi.Locate(w.ctx, w.id)
	require.NoError(w.t, err)
	return f
}

// A task moved between the read of its entry and the reads of its rows (the keeper of a
// series asking about an occurrence whose expired marker a consumer leases again) is
// found where it went, not reported gone: a keeper told "gone" moves the series on while
// the occurrence runs.
func TestLocateFollowsAMoveDuringTheLookup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	pending := w.row(w.now.Add(-time.Minute), 0)
	w.write(store.Insert, pending)
	first := w.row(w.now.Add(-time.Second), 1) // its marker, expired
	w.lease(pending, first, taskindex.Scheduled)
	second := w.row(w.now.Add(10*time.Second), 2)

	f := w.locate(func() { w.lease(first, second, taskindex.InFlight) })
	require.Equal(t, taskindex.InFlight, f.State)
	require.Equal(t, second.ID, f.Row.ID)
}

// The same for a task never moved before, which has no entry: its first lease lands
// between the lookup's read of the (absent) entry and its read of the row at the task's
// home (sim seed 789: a series keeper moved the series on beside the occurrence).
func TestLocateFollowsAFirstMoveDuringTheLookup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	lay := w.q.Layout()
	home := w.row(w.now.Add(-time.Minute), 0)
	home.ID = w.id
	home.Key = lay.Key(lay.Bucket(shard.IDTime(w.id)), lay.ShardFor(w.id))
	w.write(store.Insert, home)
	marker := w.row(w.now.Add(10*time.Second), 1)

	f := w.locate(func() { w.lease(home, marker, taskindex.Scheduled) })
	require.Equal(t, taskindex.InFlight, f.State)
	require.Equal(t, marker.ID, f.Row.ID)
}
