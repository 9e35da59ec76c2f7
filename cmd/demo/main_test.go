package main

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, time.Millisecond, percentile(sorted, 0))
	require.Equal(t, 50*time.Millisecond, percentile(sorted, 0.5))
	require.Equal(t, 99*time.Millisecond, percentile(sorted, 0.99))
	require.Equal(t, 100*time.Millisecond, percentile(sorted, 1))
	require.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 0.99))
	require.NotPanics(t, func() {
		require.Zero(t, percentile(nil, 1), "nothing delivered: no lateness")
	})
}

// TestTallyCompletesOnce: the demo stops its consumers when the last missing task
// arrives; a duplicate delivered after that must not signal completion again (closing
// the done channel twice panicked exactly when duplicates were to be reported).
func TestTallyCompletesOnce(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tl := newTally(3)
	require.False(t, tl.add(a, time.Millisecond))
	require.False(t, tl.add(a, time.Millisecond), "a duplicate completes nothing")
	require.False(t, tl.add(b, time.Millisecond))
	require.True(t, tl.add(c, time.Millisecond), "the last missing task completes the set")
	require.False(t, tl.add(c, time.Millisecond), "a duplicate after completion")
	require.False(t, tl.add(b, time.Millisecond), "another duplicate after completion")
	lost, dups := tl.outcome([]uuid.UUID{a, b, c})
	require.Zero(t, lost)
	require.Equal(t, 3, dups)
	require.Len(t, tl.lateness, 6, "every delivery's lateness counts")
}

func TestTallyCountsLost(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	tl := newTally(3)
	require.False(t, tl.add(a, 0))
	require.False(t, tl.add(a, 0))
	lost, dups := tl.outcome([]uuid.UUID{a, b, c})
	require.Equal(t, 2, lost)
	require.Equal(t, 1, dups)
}
