package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// TestTaskOutlivesLongOutage schedules a task while no consumer runs and starts the
// first consumer 0 to 3 laps of the ring later: the task waits in a partition whose
// ring slot came round again meanwhile, and must still be delivered. (Consumers used to
// start each partition at the previous lap, so a task two laps old was never read.)
func TestTaskOutlivesLongOutage(t *testing.T) {
	t.Parallel()
	for laps := range 4 {
		t.Run(fmt.Sprintf("laps=%d", laps), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shardqtype.QueueConfig{ShardCount: 2, BucketCount: 4, BucketDuration: time.Second, DefaultTimeout: time.Second})
			id := e.schedule(producer.Task{Payload: []byte("x")})[0]
			e.clock.Add(time.Duration(laps)*e.q.Layout().Lap() + 1500*time.Millisecond)
			c := e.consumer()
			// A consumer reaches every partition within one lap of its start.
			for range 4 * e.q.BucketCount {
				got := e.acquire(c, 10)
				if len(got) > 0 {
					require.Equal(t, id, got[0].ID)
					return
				}
				e.clock.Add(e.q.BucketDuration / 4)
			}
			t.Fatalf("a task scheduled %d laps before the first consumer started was never delivered", laps)
		})
	}
}
