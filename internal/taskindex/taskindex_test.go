package taskindex

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/shard"
)

// TestStampOrdersSteps: every step of a delivery, the final one included, is stamped
// before the next delivery's first.
func TestStampOrdersSteps(t *testing.T) {
	id := shard.NewID(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	for token := range int64(5) {
		first, last := Stamp(id, token, 0), Stamp(id, token, Final)
		require.Less(t, first, Stamp(id, token, 1))
		require.Less(t, last, Stamp(id, token+1, 0))
	}
}

// TestTTL keeps an entry Keep past its row's visibility, and never over Cassandra's limit.
func TestTTL(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	require.Equal(t, Keep, TTL(now, now.Add(-time.Hour)))
	require.Equal(t, time.Hour+Keep, TTL(now, now.Add(time.Hour)))
	require.Equal(t, maxTTL, TTL(now, now.AddDate(100, 0, 0)))
}
