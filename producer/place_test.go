package producer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
)

// stepClock moves by step at every reading, as a clock does over round trips.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	c.now = c.now.Add(c.step)
	return now
}

// A keyed task due now is placed by the time after its key's claim, not before: the
// claim's lightweight transaction takes round trips, and a row written that much later than
// its ID time lands below the floors of consumers that read its partition meanwhile.
func TestKeyedRowPlacedAfterClaim(t *testing.T) {
	t.Parallel()
	s, q := setup(t)
	start := time.Now()
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: &stepClock{now: start, step: 3 * time.Second}})
	require.NoError(t, err)
	id, err := p.ScheduleTask(context.Background(), producer.Task{Queue: q.Name, Key: "k"})
	require.NoError(t, err)
	var rowID gocql.UUID
	require.NoError(t, s.Query(`SELECT id FROM tasks WHERE kind = 1 AND task_id = ? ALLOW FILTERING`, gocql.UUID(id)).Scan(&rowID))
	require.True(t, shard.IDTime(uuid.UUID(rowID)).After(start.Add(time.Second)),
		"placed at %v, the time before the claim", shard.IDTime(uuid.UUID(rowID)).Sub(start))
}
