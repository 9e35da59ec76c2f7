package layouts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// An old layout is marked drained only once it is sealed and its whole ring holds no
// task row, and only from the history it was read in.
func TestDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	tables := store.Of(gocqlv1.New(s))
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q", ShardCount: 3, BucketCount: 7, BucketDuration: time.Second, DefaultTimeout: time.Second})
	require.NoError(t, err)
	h, err := layouts.Decode(q.Layout(), "")
	require.NoError(t, err)
	next := q.Layout()
	next.Generation, next.ShardCount = 1, 2
	now := time.Now()
	h.Gens = append(h.Gens, layouts.Gen{Layout: next, From: now.Add(-layouts.SealAfter + time.Second)})
	h.Version = 1
	applied, err := tables.Queues().SetLayouts(ctx, q.Name, "", h.Encode())
	require.NoError(t, err)
	require.True(t, applied)

	looked, drained, err := layouts.Drain(ctx, tables, h, now, 4)
	require.NoError(t, err)
	require.False(t, looked || drained, "not sealed yet: a writer may still write into it")

	id := shard.NewID(now.Add(7 * 24 * time.Hour))
	row := taskrow.Row{Key: q.Layout().Key(5, 2), Priority: 3, ID: id, TaskID: id, DueAt: now, Timeout: time.Second}
	require.NoError(t, tables.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: row, Stamp: time.Now().UnixMicro()}}))
	sealed := now.Add(2 * time.Second)
	looked, drained, err = layouts.Drain(ctx, tables, h, sealed, 4)
	require.NoError(t, err)
	require.True(t, looked)
	require.False(t, drained, "a task due next week is left in it")

	require.NoError(t, tables.Tasks().Write(ctx, []store.Mutation{{Op: store.Delete, Row: row, Stamp: time.Now().UnixMicro()}}))
	stale := h
	stale.Version = 0
	_, drained, err = layouts.Drain(ctx, tables, stale, sealed, 4)
	require.NoError(t, err)
	require.False(t, drained, "not from a history other than the stored one")
	_, drained, err = layouts.Drain(ctx, tables, h, sealed, 4)
	require.NoError(t, err)
	require.True(t, drained)
	st, err := tables.Queues().Status(ctx, q.Name, true)
	require.NoError(t, err)
	back, err := layouts.Decode(q.Layout(), st.Layouts)
	require.NoError(t, err)
	require.Equal(t, 1, back.Drained)
	require.Equal(t, []shard.Layout{next}, back.Live())
	looked, _, err = layouts.Drain(ctx, tables, back, sealed, 4)
	require.NoError(t, err)
	require.False(t, looked, "the newest layout is never drained")
}
