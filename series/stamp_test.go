package series_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

type aheadHost time.Duration

func (h aheadHost) Now() time.Time { return time.Now().Add(time.Duration(h)) }

// A client whose first call is a Create measures the cluster's clock before it stamps the
// first occurrence: on a host 5 s ahead, unmeasured, the occurrence's row was stamped past
// the delete of the Pause that followed, which returned success while the occurrence
// stayed and ran (found by the simulator, seed 101).
func TestCreateStampsByTheClusterClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q"})
	require.NoError(t, err)
	ahead, err := series.New(cassandratest.Driver(s), series.Config{Clock: clustertime.New(store.Of(gocqlv1.New(s)), aheadHost(5*time.Second), nil)})
	require.NoError(t, err)
	info, err := ahead.Create(ctx, series.Series{Queue: q.Name, Name: "s", Every: time.Minute})
	require.NoError(t, err)

	c, err := series.New(cassandratest.Driver(s), series.Config{})
	require.NoError(t, err)
	require.NoError(t, c.Pause(ctx, q.Name, "s"))
	left, err := taskscan.TaskIDs(ctx, cassandratest.Driver(s), q, 4, 1000)
	require.NoError(t, err)
	require.NotContains(t, left, info.NextID, "the paused series' pending occurrence is gone")
}
