package shardq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
)

func TestApplySchemaTwice(t *testing.T) {
	t.Parallel()
	ks := cassandratest.Keyspace(t)
	s := cassandratest.SessionFor(t, ks)
	require.NoError(t, shardq.ApplySchema(context.Background(), s))
	require.NoError(t, shardq.ApplySchema(context.Background(), s))
	require.Len(t, shardq.Schema(), 4)
	var opts map[string]string
	require.NoError(t, s.Query(`SELECT compaction FROM system_schema.tables WHERE keyspace_name = ? AND table_name = 'tasks'`, ks).Scan(&opts))
	require.Contains(t, opts["class"], "LeveledCompactionStrategy")
}

func TestCreateAndLoadQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, s, shardq.QueueConfig{Name: "emails"})
	require.NoError(t, err)
	require.Equal(t, shardq.QueueConfig{Name: "emails", BucketCount: shardq.DefaultBucketCount,
		BucketDuration: shardq.DefaultBucketDuration, ShardCount: shardq.DefaultShardCount,
		DefaultTimeout: shardq.DefaultTimeout, LockTTL: shardq.DefaultLockTTL}, q)

	loaded, err := shardq.LoadQueue(ctx, s, "emails")
	require.NoError(t, err)
	require.Equal(t, q, loaded)

	again, err := shardq.CreateQueue(ctx, s, q)
	require.NoError(t, err, "creating with the same settings is harmless")
	require.Equal(t, q, again)

	_, err = shardq.CreateQueue(ctx, s, shardq.QueueConfig{Name: "emails", ShardCount: 3})
	require.ErrorIs(t, err, shardq.ErrQueueMismatch)
	var mm *shardq.QueueMismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, "ShardCount", mm.Field)
	require.Equal(t, shardq.DefaultShardCount, mm.Stored)
	require.Equal(t, 3, mm.Given)

	_, err = shardq.LoadQueue(ctx, s, "missing")
	require.ErrorIs(t, err, shardq.ErrQueueNotFound)
}

func TestQueueConfigValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	bad := map[string]shardq.QueueConfig{
		"QueueConfig.Name":           {Name: "Emails"},
		"QueueConfig.BucketCount":    {Name: "q", BucketCount: -1},
		"QueueConfig.BucketDuration": {Name: "q", BucketDuration: 1500 * time.Microsecond},
		"QueueConfig.ShardCount":     {Name: "q", ShardCount: shardq.MaxShardCount + 1},
		"QueueConfig.LockTTL":        {Name: "q", LockTTL: 500 * time.Millisecond},
		"QueueConfig.DefaultTimeout": {Name: "q", BucketCount: 3, BucketDuration: time.Second, DefaultTimeout: 3 * time.Second},
	}
	for field, cfg := range bad {
		_, err := shardq.CreateQueue(ctx, s, cfg)
		require.ErrorIs(t, err, shardq.ErrInvalid, field)
		var ve *shardq.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, field, ve.Field)
	}
	for _, name := range []string{"", "a:b", "x y", "Q"} {
		_, err := shardq.LoadQueue(ctx, s, name)
		require.ErrorIs(t, err, shardq.ErrInvalid, name)
	}
}
