package shardq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
)

// A layout change takes effect at least LayoutLead ahead, at a boundary of both the old
// and the new buckets; a second one is refused with the time it may be made while the
// first has yet to take effect; asking again for the pending layout changes nothing.
func TestChangeLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	_, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), "nosuch", shardq.LayoutConfig{ShardCount: 2})
	require.ErrorIs(t, err, shardq.ErrQueueNotFound)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: "q", BucketCount: 60, BucketDuration: 10 * time.Second, ShardCount: 8})
	require.NoError(t, err)

	same, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 8})
	require.NoError(t, err)
	require.Equal(t, shardq.LayoutChange{}, same, "the layout in force: nothing changes")

	_, err = shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{BucketDuration: 7 * time.Millisecond})
	var ve *shardq.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "LayoutConfig.BucketDuration", ve.Field)
	_, err = shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{BucketCount: 2})
	require.ErrorAs(t, err, &ve, "a lap of 20 s cannot hold the default timeout of 30 s")
	require.Equal(t, "QueueConfig.DefaultTimeout", ve.Field)
	_, err = shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{BucketDuration: 9973 * time.Millisecond})
	require.ErrorAs(t, err, &ve, "no common boundary within an hour")

	before := time.Now()
	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 16, BucketDuration: time.Second})
	require.NoError(t, err)
	require.Equal(t, 1, ch.Generation)
	require.False(t, ch.From.Before(before.Add(shardq.LayoutLead-time.Second)), "at least LayoutLead ahead (less the clocks' skew)")
	require.Less(t, ch.From.Sub(before), shardq.LayoutLead+20*time.Second)
	require.Zero(t, ch.From.UnixMilli()%10_000, "a boundary of the old buckets and the new")

	again, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 16, BucketDuration: time.Second})
	require.NoError(t, err)
	require.Equal(t, ch, again, "the pending layout: nothing changes")
	_, err = shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 2})
	require.ErrorIs(t, err, shardq.ErrLayoutChanging)
	var lce *shardq.LayoutChangingError
	require.True(t, errors.As(err, &lce))
	require.Equal(t, ch.From, lce.RetryAt)

	got, err := shardq.QueueLayouts(ctx, cassandratest.Driver(s), q.Name)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, q.Layout(), got[0].Layout)
	require.Equal(t, 16, got[1].Layout.ShardCount)
	require.Equal(t, time.Second, got[1].Layout.BucketDuration)
	require.Equal(t, 60, got[1].Layout.BucketCount)
	require.Equal(t, ch.From, got[1].From)
	require.False(t, got[0].Drained)
	loaded, err := shardq.LoadQueue(ctx, cassandratest.Driver(s), q.Name)
	require.NoError(t, err)
	require.Equal(t, q, loaded, "the settings the queue was created with stay as they were")
}
