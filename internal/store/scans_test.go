package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// Scans read a range of task rows in clustering order, page by page, and leave the
// payloads (and, for Tally, all but what a row counts as) unread.
func TestScansReadRangesWithoutPayloads(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	const key = "q:0:0"
	now := time.Now().UTC().Truncate(time.Millisecond)
	row := func(prio int8, at time.Time, attempt int, retrying bool) taskrow.Row {
		id := shard.NewID(at)
		return taskrow.Row{Key: key, Priority: prio, ID: id, TaskID: shard.NewID(now), Payload: []byte("payload"),
			DueAt: now, Timeout: 3 * time.Second, Attempt: attempt, Token: int64(attempt) + 4, Keyed: true, Series: "s", Retrying: retrying}
	}
	before := row(9, now.Add(-time.Hour), 0, false) // below from
	rows := []taskrow.Row{
		row(9, now, 0, false),
		row(9, now.Add(time.Second), 2, true),
		row(3, now.Add(-time.Second), 1, false),
	}
	after := row(3, now.Add(time.Hour), 0, false) // above to
	other := row(5, now, 0, false)                // a priority not read
	var muts []store.Mutation
	for _, r := range append([]taskrow.Row{before, after, other}, rows...) {
		muts = append(muts, store.Mutation{Op: store.Insert, Row: r, Stamp: now.UnixMicro()})
	}
	require.NoError(t, s.Tasks().Write(ctx, muts))
	prios := []int8{9, 3}
	from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))

	var tallied []taskrow.Row
	require.NoError(t, s.Scans().Tally(ctx, key, prios, from, to, 1, func(r taskrow.Row) { tallied = append(tallied, r) }))
	require.Len(t, tallied, len(rows), "pages of one row each")
	for i, r := range rows {
		require.Equal(t, taskrow.Row{Key: key, Priority: r.Priority, ID: r.ID, Attempt: r.Attempt, Retrying: r.Retrying}, tallied[i])
	}

	heads, err := s.Scans().Heads(ctx, key, prios, from, to, 2)
	require.NoError(t, err)
	require.Len(t, heads, 2, "up to limit")
	for i, r := range rows[:2] {
		r.Payload, r.Keyed, r.Series, r.Retrying = nil, false, "", false
		require.Equal(t, r, heads[i])
	}

	var ids []uuid.UUID
	require.NoError(t, s.Scans().TaskIDs(ctx, key, 2, func(id uuid.UUID) { ids = append(ids, id) }))
	var want []uuid.UUID
	for _, r := range append([]taskrow.Row{before, after, other}, rows...) {
		want = append(want, r.TaskID)
	}
	require.ElementsMatch(t, want, ids, "every row of the partition, whatever its priority and time")
}

// Queues tell when each was created; a queue not stored is not found.
func TestQueuesCreated(t *testing.T) {
	t.Parallel()
	ctx, _, s := setup(t)
	queues := s.Queues()
	created, err := queues.Statuses(ctx)
	require.NoError(t, err)
	require.Empty(t, created)
	_, err = queues.Status(ctx, "q", false)
	require.ErrorIs(t, err, store.ErrNotFound)

	for _, name := range []string{"q", "r"} {
		applied, _, err := queues.Create(ctx, store.Queue{Name: name, BucketCount: 10, BucketDuration: time.Second,
			ShardCount: 1, DefaultTimeout: time.Second, LockTTL: time.Second, CompletedRetention: time.Minute})
		require.NoError(t, err)
		require.True(t, applied)
	}
	st, err := queues.Status(ctx, "q", false)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), st.CreatedAt, time.Minute)
	require.False(t, st.Paused)
	created, err = queues.Statuses(ctx)
	require.NoError(t, err)
	require.Len(t, created, 2)
	require.Equal(t, st, created["q"])
	require.WithinDuration(t, time.Now(), created["r"].CreatedAt, time.Minute)
}
