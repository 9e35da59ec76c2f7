package shardq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
)

// TestLockTTLAtLeastTwoSeconds: Cassandra expires TTLs on whole seconds, so a 1 s lock
// could last next to nothing.
func TestLockTTLAtLeastTwoSeconds(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, -2 * time.Second} {
		err := shardq.QueueConfig{Name: "q", LockTTL: ttl}.WithDefaults().Validate()
		require.ErrorIs(t, err, shardq.ErrInvalid, ttl)
		var ve *shardq.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "QueueConfig.LockTTL", ve.Field)
	}
	require.NoError(t, shardq.QueueConfig{Name: "q", LockTTL: 2 * time.Second}.WithDefaults().Validate())
}

// TestCreateQueueSettlesPastItsDeadline creates queues with deadlines shorter than the
// LWT takes, so the driver gives up while the server may still apply the insert. Reading
// back must outlive the caller's deadline: an insert the server applied is then reported
// as a created queue, not as an error.
func TestCreateQueueSettlesPastItsDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &failedInserts{names: map[string]bool{}}
	s := cassandratest.SessionFor(t, cassandratest.SchemaKeyspace(t), func(c *gocql.ClusterConfig) { c.QueryObserver = obs })

	createdLate := 0
	for i := 0; i < 200 && createdLate < 3; i++ {
		name := fmt.Sprintf("late%d", i)
		short, cancel := context.WithTimeout(ctx, time.Duration(100+i*20)*time.Microsecond)
		q, err := shardq.CreateQueue(short, cassandratest.Driver(s), shardq.QueueConfig{Name: name})
		cancel()
		if err != nil || !obs.failed(name) {
			continue // not created, or the driver had its answer in time
		}
		createdLate++
		stored, err := shardq.LoadQueue(ctx, cassandratest.Driver(s), name)
		require.NoError(t, err, "a queue reported as created is stored")
		require.Equal(t, q, stored)
	}
	require.Positive(t, createdLate, "no insert that timed out in the driver was reported as created")
}

// failedInserts records the queues whose INSERT failed in the driver.
type failedInserts struct {
	mu    sync.Mutex
	names map[string]bool
}

func (f *failedInserts) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Err == nil || !strings.HasPrefix(q.Statement, "INSERT INTO queues") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names[q.Values[0].(string)] = true
}

func (f *failedInserts) failed(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names[name]
}
