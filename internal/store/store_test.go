package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

func setup(t *testing.T) (context.Context, *gocql.Session, store.Store) {
	t.Helper()
	session := cassandratest.SchemaSession(t)
	// The test's minute starts once its schema stands: creating it at RF 3 on a loaded
	// machine can take most of a minute by itself.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, session, store.Of(gocqlv1.New(session))
}

// A claim conditioned on the row as seen applies only while the row is as seen: the zero
// Claim stands for no row, and a claim that loses returns the row that won.
func TestKeysClaimOnTheRowAsSeen(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	keys := s.Keys()
	at := time.Now().Truncate(time.Millisecond)
	first := store.Claim{Holder: shard.NewID(at), ClaimedAt: at}
	second := store.Claim{Holder: shard.NewID(at), ClaimedAt: at.Add(time.Millisecond)}

	_, err := keys.Get(ctx, "q", "k", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	applied, _, err := keys.Claim(ctx, "q", "k", first, time.Minute, store.Claim{})
	require.NoError(t, err)
	require.True(t, applied)

	applied, cur, err := keys.Claim(ctx, "q", "k", second, time.Minute, store.Claim{})
	require.NoError(t, err)
	require.False(t, applied, "the row is no longer as seen")
	require.Equal(t, first.Holder, cur.Holder)
	require.True(t, first.ClaimedAt.Equal(cur.ClaimedAt))

	got, left, err := keys.GetTTL(ctx, "q", "k")
	require.NoError(t, err)
	require.Equal(t, first.Holder, got.Holder)
	require.Greater(t, left, time.Duration(0))
	require.LessOrEqual(t, left, time.Minute)

	applied, _, err = keys.Claim(ctx, "q", "k", second, time.Minute, cur)
	require.NoError(t, err)
	require.True(t, applied, "conditioned on the row as it is")

	require.NoError(t, keys.Release(ctx, "q", "k", first.Holder))
	got, err = keys.Get(ctx, "q", "k", true)
	require.NoError(t, err)
	require.Equal(t, second.Holder, got.Holder, "only the holder releases")
	require.NoError(t, keys.Release(ctx, "q", "k", second.Holder))
	_, err = keys.Get(ctx, "q", "k", true)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Creating a queue that exists applies nothing and returns the stored settings.
func TestQueuesCreateReturnsTheStored(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	queues := s.Queues()
	q := store.Queue{Name: "q", BucketCount: 10, BucketDuration: time.Second, ShardCount: 2,
		DefaultTimeout: 3 * time.Second, LockTTL: 3 * time.Second, CompletedRetention: time.Minute}

	_, err := queues.Get(ctx, "q")
	require.ErrorIs(t, err, store.ErrNotFound)
	applied, _, err := queues.Create(ctx, q)
	require.NoError(t, err)
	require.True(t, applied)
	other := q
	other.ShardCount = 4
	applied, stored, err := queues.Create(ctx, other)
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, q, stored)
	got, err := queues.Get(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, q, got)
	names, err := queues.Names(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, names)
}

// A conditional batch applies only while its lock holds and its deleted rows exist; the
// row it inserts carries no timestamp of its own, and a row written apart keeps its stamp.
func TestTasksApplyIsFencedByItsLockAndRows(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	tasks := s.Tasks()
	const key = "q:0:0"
	now := time.Now().UTC()
	row := func(at time.Time) taskrow.Row {
		id := shard.NewID(at)
		return taskrow.Row{Key: key, Priority: 3, ID: id, TaskID: id, Payload: []byte("p"), DueAt: at.Truncate(time.Millisecond), Timeout: time.Second}
	}
	from, to := row(now), row(now.Add(time.Second))
	require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Insert, Row: from, Stamp: now.UnixMicro()}}))
	got, ok, err := tasks.Read(ctx, key, from.Priority, from.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, from, got)
	found, ok, err := tasks.Find(ctx, key, []int8{0, 3, 9}, from.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, from, found)

	l, err := locking.New(s.Locks(), locking.Config{})
	require.NoError(t, err)
	le, err := l.Acquire(ctx, key)
	require.NoError(t, err)
	move := []store.Mutation{{Op: store.Release, Lock: le.Ref()}, {Op: store.DeleteIfExists, Row: from}, {Op: store.Insert, Row: to}}
	applied, err := tasks.Apply(ctx, move)
	require.NoError(t, err)
	require.True(t, applied)
	there, err := tasks.Exists(ctx, from)
	require.NoError(t, err)
	require.False(t, there)
	there, err = tasks.Exists(ctx, to)
	require.NoError(t, err)
	require.True(t, there)
	settled, err := le.Settle(ctx)
	require.NoError(t, err)
	require.True(t, settled, "the batch left its lease's receipt")

	applied, err = tasks.Apply(ctx, move)
	require.NoError(t, err)
	require.False(t, applied, "the lease was released")

	deleted, err := tasks.DeleteIfExists(ctx, to)
	require.NoError(t, err)
	require.True(t, deleted)
	deleted, err = tasks.DeleteIfExists(ctx, to)
	require.NoError(t, err)
	require.False(t, deleted)
}

// A series row that holds only the Written cell a delete left behind is not found.
func TestSeriesDeletedRowIsNotFound(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	series := s.Series()
	now := time.Now().UTC().Truncate(time.Millisecond)
	r := store.SeriesRow{Queue: "q", Name: "s", Spec: "{}", Version: 1, Seq: 1, Open: true, TaskID: shard.NewID(now),
		Nominal: now, Priority: 2, Stamp: now.UnixMicro(), AdvancedAt: now, CreatedAt: now}

	require.NoError(t, series.AddName(ctx, "q", "s", time.Now().UnixMicro()))
	applied, err := series.Put(ctx, r, 0)
	require.NoError(t, err)
	require.True(t, applied)
	applied, err = series.Put(ctx, r, 0)
	require.NoError(t, err)
	require.False(t, applied, "a series of that name exists")
	require.NoError(t, series.MarkWritten(ctx, "q", "s", r.TaskID, time.Now().UnixMicro()))
	got, err := series.Get(ctx, "q", "s", true)
	require.NoError(t, err)
	want := r
	want.Written = r.TaskID
	require.Equal(t, want, normal(got))

	applied, err = series.Delete(ctx, "q", "s", 2)
	require.NoError(t, err)
	require.False(t, applied, "not at that version")
	applied, err = series.Delete(ctx, "q", "s", 1)
	require.NoError(t, err)
	require.True(t, applied)
	require.NoError(t, series.MarkWritten(ctx, "q", "s", shard.NewID(now), time.Now().UnixMicro()))
	_, err = series.Get(ctx, "q", "s", false)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, series.DeleteName(ctx, "q", "s", time.Now().UnixMicro()))
	names, err := series.Names(ctx, "q")
	require.NoError(t, err)
	require.Empty(t, names)
}

// normal reads Nominal, stored as nanoseconds, in UTC as the driver reads the other times.
func normal(r store.SeriesRow) store.SeriesRow {
	r.Nominal = r.Nominal.UTC()
	return r
}

// The lock row's writes apply only on the row as expected, and one that does not apply
// returns the row as it stands; a batch that releases a holding leaves its receipt
// exactly when it applies.
func TestLocksWriteOnTheRowAsExpected(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	locks := s.Locks()
	const key = "q:0:0"
	token := func(v int64) *int64 { return &v }
	first, second := uuid.UUID(gocql.TimeUUID()), uuid.UUID(gocql.TimeUUID())

	row, err := locks.Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.LockRow{}, row, "no lock row yet")
	applied, _, err := locks.Take(ctx, key, first, 1, nil, 10*time.Second)
	require.NoError(t, err)
	require.True(t, applied)
	held := store.LockRow{Holder: first, Token: token(1)}
	applied, cur, err := locks.Take(ctx, key, second, 2, token(1), 10*time.Second)
	require.NoError(t, err)
	require.False(t, applied, "held")
	require.Equal(t, held, cur)
	applied, cur, err = locks.Bump(ctx, key, 2, token(1))
	require.NoError(t, err)
	require.False(t, applied, "held")
	require.Equal(t, held, cur)

	ref := store.LockRef{Key: key, Holder: first, Token: 1}
	stale := store.LockRef{Key: key, Holder: first, Token: 0}
	applied, cur, err = locks.Renew(ctx, stale, 10*time.Second)
	require.NoError(t, err)
	require.False(t, applied, "not at that token")
	require.Equal(t, held, cur)
	applied, _, err = locks.Renew(ctx, ref, 10*time.Second)
	require.NoError(t, err)
	require.True(t, applied)
	applied, _, err = locks.Release(ctx, ref)
	require.NoError(t, err)
	require.True(t, applied)
	row, err = locks.Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.LockRow{Token: token(1)}, row, "free, its token kept")

	applied, _, err = locks.Bump(ctx, key, 2, token(1))
	require.NoError(t, err)
	require.True(t, applied)
	applied, cur, err = locks.Take(ctx, key, second, 2, token(1), 10*time.Second)
	require.NoError(t, err)
	require.False(t, applied, "the token moved")
	require.Equal(t, store.LockRow{Token: token(2)}, cur)
	applied, _, err = locks.Take(ctx, key, second, 3, token(2), 10*time.Second)
	require.NoError(t, err)
	require.True(t, applied)

	last := store.LockRef{Key: key, Holder: second, Token: 3}
	release := func(lk store.LockRef) bool {
		applied, err := s.Tasks().Apply(ctx, []store.Mutation{{Op: store.Release, Lock: lk}})
		require.NoError(t, err)
		return applied
	}
	require.False(t, release(ref), "no longer the holder")
	require.True(t, release(last))
	for _, lk := range []store.LockRef{ref, last} {
		there, err := locks.Receipt(ctx, lk)
		require.NoError(t, err)
		require.Equal(t, lk == last, there)
	}
}

// Cassandra stamps every write of a conditional batch with the batch's ballot
// (CASSANDRA_NOTES: a conditional batch cannot carry a custom timestamp). Markers a
// conditional batch writes (here ReplaceMarker's) therefore always order after the plain
// writes stamped below the cluster's time, and never need a Stamp.
func TestConditionalBatchStampsByItsBallot(t *testing.T) {
	t.Parallel()
	ctx, session, s := setup(t)
	at := time.Now().UTC()
	row := func(at time.Time) taskrow.Row {
		id := shard.NewID(at)
		return taskrow.Row{Key: "q:0:0", Priority: 1, ID: id, TaskID: id, DueAt: at.Truncate(time.Millisecond), Timeout: time.Second}
	}
	from, to := row(at), row(at.Add(time.Second))
	require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: from, Stamp: at.UnixMicro()}}))
	applied, err := s.Leasing().ReplaceMarker(ctx, from, to)
	require.NoError(t, err)
	require.True(t, applied)

	var stamp int64
	require.NoError(t, session.Query(`SELECT writetime(task_id) FROM tasks WHERE shard_key = ? AND kind = 1 AND priority = ? AND id = ?`,
		to.Key, to.Priority, gocql.UUID(to.ID)).WithContext(ctx).Scan(&stamp))
	require.Greater(t, stamp, at.Add(-time.Minute).UnixMicro(), "the ballot's time, not the 1000 asked for")
}
