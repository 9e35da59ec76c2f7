package producer_test

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
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

type aheadHost time.Duration

func (h aheadHost) Now() time.Time { return time.Now().Add(time.Duration(h)) }

// A producer whose first call is a Reschedule measures the cluster's clock before it
// stamps the task's new row: on a host 5 s ahead, unmeasured, the row was stamped past
// the delete of the Cancel that followed, which returned success while the task stayed
// (found by the simulator, seed 7000425).
func TestRescheduleStampsByTheClusterClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q"})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, DueAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)

	ahead, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clustertime.New(store.Of(gocqlv1.New(s)), aheadHost(5*time.Second), nil)})
	require.NoError(t, err)
	require.NoError(t, ahead.Reschedule(ctx, id, producer.RescheduleOptions{DueAt: time.Now().Add(10 * time.Minute)}))
	require.NoError(t, p.Cancel(ctx, id, producer.CancelOptions{}))
	left, err := taskscan.TaskIDs(ctx, cassandratest.Driver(s), q, 4, 1000)
	require.NoError(t, err)
	require.NotContains(t, left, id, "the cancelled task's row is gone")
}
