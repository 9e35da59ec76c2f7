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
	require.NoError(t, shardq.ApplySchema(context.Background(), cassandratest.Driver(s)))
	require.NoError(t, shardq.ApplySchema(context.Background(), cassandratest.Driver(s)))
	require.Len(t, shardq.Schema(), 16)
	var opts map[string]string
	require.NoError(t, s.Query(`SELECT compaction FROM system_schema.tables WHERE keyspace_name = ? AND table_name = 'tasks'`, ks).Scan(&opts))
	require.Contains(t, opts["class"], "LeveledCompactionStrategy")
}

// A keyspace made before the columns that came later (queue_signals' slots, the tasks'
// and dead letters' headers, the queues' paused and layouts) gets them from ApplySchema.
func TestApplySchemaAddsLaterColumns(t *testing.T) {
	t.Parallel()
	s := cassandratest.DDLSession(t)
	ks := s.Query("").Keyspace()
	ctx := context.Background()
	require.NoError(t, shardq.ApplySchema(ctx, cassandratest.Driver(s)))
	later := [][2]string{{"queue_signals", "slots"}, {"tasks", "headers"}, {"dead_letters", "headers"}, {"queues", "paused"}, {"queues", "layouts"}, {"tasks", "task_kind"}, {"dead_letters", "task_kind"}}
	for _, c := range later {
		require.NoError(t, s.Query(`ALTER TABLE `+c[0]+` DROP `+c[1]).Exec())
	}
	require.NoError(t, shardq.ApplySchema(ctx, cassandratest.Driver(s)))
	for _, c := range later {
		var n int
		require.NoError(t, s.Query(`SELECT count(*) FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ? AND column_name = ?`,
			ks, c[0], c[1]).Scan(&n))
		require.Equal(t, 1, n, "%s.%s", c[0], c[1])
	}
}

func TestCreateAndLoadQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "emails"})
	require.NoError(t, err)
	require.Equal(t, shardq.QueueConfig{Name: "emails", BucketCount: shardq.DefaultBucketCount,
		BucketDuration: shardq.DefaultBucketDuration, ShardCount: shardq.DefaultShardCount,
		DefaultTimeout: shardq.DefaultTimeout, LockTTL: shardq.DefaultLockTTL}, q)

	loaded, err := shardq.LoadQueue(ctx, cassandratest.Driver(s), "emails")
	require.NoError(t, err)
	require.Equal(t, q, loaded)

	again, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), q)
	require.NoError(t, err, "creating with the same settings is harmless")
	require.Equal(t, q, again)

	_, err = shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "emails", ShardCount: 3})
	require.ErrorIs(t, err, shardq.ErrQueueMismatch)
	var mm *shardq.QueueMismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, "ShardCount", mm.Field)
	require.Equal(t, shardq.DefaultShardCount, mm.Stored)
	require.Equal(t, 3, mm.Given)

	_, err = shardq.LoadQueue(ctx, cassandratest.Driver(s), "missing")
	require.ErrorIs(t, err, shardq.ErrQueueNotFound)
}

// TestQueueConfigValidate needs no cluster: Validate is pure.
func TestQueueConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []struct {
		field string
		cfg   shardq.QueueConfig
	}{
		{"QueueConfig.Name", shardq.QueueConfig{Name: "Emails"}},
		{"QueueConfig.Name", shardq.QueueConfig{Name: "a:b"}},
		{"QueueConfig.BucketCount", shardq.QueueConfig{Name: "q", BucketCount: -1}},
		{"QueueConfig.BucketCount", shardq.QueueConfig{Name: "q", BucketCount: shardq.MaxBucketCount + 1}},
		{"QueueConfig.BucketDuration", shardq.QueueConfig{Name: "q", BucketDuration: 1500 * time.Microsecond}},
		{"QueueConfig.BucketDuration", shardq.QueueConfig{Name: "q", BucketDuration: shardq.MinBucketDuration - time.Millisecond}},
		{"QueueConfig.ShardCount", shardq.QueueConfig{Name: "q", ShardCount: -1}},
		{"QueueConfig.ShardCount", shardq.QueueConfig{Name: "q", ShardCount: shardq.MaxShardCount + 1}},
		{"QueueConfig.LockTTL", shardq.QueueConfig{Name: "q", LockTTL: 500 * time.Millisecond}},
		{"QueueConfig.LockTTL", shardq.QueueConfig{Name: "q", LockTTL: 1500 * time.Millisecond}},
		{"QueueConfig.DefaultTimeout", shardq.QueueConfig{Name: "q", BucketCount: 3, BucketDuration: time.Second, DefaultTimeout: 2001 * time.Millisecond}},
		{"QueueConfig.DefaultTimeout", shardq.QueueConfig{Name: "q", DefaultTimeout: 1500 * time.Microsecond}},
		{"QueueConfig.DefaultTimeout", shardq.QueueConfig{Name: "q", DefaultTimeout: -time.Second}},
	}
	for _, tc := range bad {
		err := tc.cfg.WithDefaults().Validate()
		require.ErrorIs(t, err, shardq.ErrInvalid, "%s: %+v", tc.field, tc.cfg)
		var ve *shardq.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, tc.field, ve.Field, "%+v", tc.cfg)
	}
	for _, cfg := range []shardq.QueueConfig{
		{Name: "q"},
		{Name: "a.b-c_d", BucketCount: 2, ShardCount: 1, BucketDuration: shardq.MinBucketDuration,
			DefaultTimeout: time.Millisecond, LockTTL: 5 * time.Second},
		{Name: "q", BucketCount: shardq.MaxBucketCount, ShardCount: shardq.MaxShardCount},
		{Name: "q", BucketCount: 3, BucketDuration: time.Second, DefaultTimeout: 2 * time.Second}, // the ring less one bucket
	} {
		require.NoError(t, cfg.WithDefaults().Validate(), "%+v", cfg)
	}
}

// TestCreateAndLoadQueueValidate checks that CreateQueue validates before it writes, and
// LoadQueue refuses names no queue can have.
func TestCreateAndLoadQueueValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "q", ShardCount: shardq.MaxShardCount + 1})
	var ve *shardq.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "QueueConfig.ShardCount", ve.Field)
	_, err = shardq.LoadQueue(ctx, cassandratest.Driver(s), "q")
	require.ErrorIs(t, err, shardq.ErrQueueNotFound, "nothing was written")
	for _, name := range []string{"", "a:b", "x y", "Q"} {
		_, err := shardq.LoadQueue(ctx, cassandratest.Driver(s), name)
		require.ErrorIs(t, err, shardq.ErrInvalid, name)
	}
}
