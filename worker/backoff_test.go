package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/worker"
)

// TestDefaultBackoff needs no Cassandra: go test -run TestDefaultBackoff ./worker.
func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for attempt, base := range map[int]time.Duration{
		-1: time.Second, 0: time.Second, // before any delivery: as the first
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 512 * time.Second,
		12: 2048 * time.Second, 13: time.Hour, 25: time.Hour, 1000: time.Hour,
	} {
		seen := map[time.Duration]bool{}
		for range 100 {
			d := worker.DefaultBackoff(attempt)
			require.GreaterOrEqual(t, d, base*9/10, "attempt %d", attempt)
			require.LessOrEqual(t, d, base*11/10, "attempt %d", attempt)
			seen[d] = true
		}
		require.Greater(t, len(seen), 1, "attempt %d: no jitter", attempt)
	}
}
