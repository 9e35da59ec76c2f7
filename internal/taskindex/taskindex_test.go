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

// TestLeaseStepsOrderTakes: two takes of one row declare one delivery; the later, under a
// greater lock token, is stamped later, so its entry wins whole instead of Cassandra
// keeping the greater value of each cell at one stamp (an entry naming the marker of a
// swap that did not apply: seed 40011824). A holder's moves after its swap come after
// every lease's declaration, and before the delivery's final write.
func TestLeaseStepsOrderTakes(t *testing.T) {
	id := shard.NewID(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	const delivery = 1 // the delivery token both takes declare
	for _, token := range []int64{1, 2, 1000, leaseSteps - 2} {
		require.Less(t, Stamp(id, delivery, LeaseStep(token)), Stamp(id, delivery, LeaseStep(token+1)), "token %d", token)
		require.Less(t, Stamp(id, delivery, LeaseStep(token+1)), Stamp(id, delivery, MoveStep(1)), "token %d", token)
	}
	require.Less(t, Stamp(id, delivery, MoveStep(1)), Stamp(id, delivery, MoveStep(2)))
	require.Less(t, Stamp(id, delivery, MoveStep(leaseSteps-2)), Stamp(id, delivery, Final))
}
