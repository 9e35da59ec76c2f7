package spread_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/spread"
)

// Each tenth of a second of due time fills one shard with a tenth of the rate before the
// next, up to the layout's count, then any; rings and tenths are counted apart.
func TestShardsFillInTurn(t *testing.T) {
	t.Parallel()
	c := spread.New(30) // 3 a tenth
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var got []int
	for range 11 {
		got = append(got, c.Shard("q", at.Add(time.Duration(len(got))*time.Millisecond), at, 3))
	}
	require.Equal(t, []int{0, 0, 0, 1, 1, 1, 2, 2, 2, spread.Any, spread.Any}, got)
	require.Equal(t, 0, c.Shard("q", at.Add(spread.Tenth), at, 3), "the next tenth")
	require.Equal(t, 0, c.Shard("q~1", at, at, 3), "another ring")
	// A rate below ten a second still places one task a tenth per shard.
	for _, rate := range []int{0, 1} {
		c := spread.New(rate)
		require.Equal(t, []int{0, 1, 2}, []int{c.Shard("q", at, at, 8), c.Shard("q", at, at, 8), c.Shard("q", at, at, 8)})
	}
}

// A full counter drops the tenths already past and keeps the counts of those to come.
func TestFullCounterDropsPastTenths(t *testing.T) {
	t.Parallel()
	c := spread.New(10)
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 0, c.Shard("q", at.Add(time.Hour), at, 8))
	for i := range 1<<16 - 1 {
		require.Equal(t, 0, c.Shard("q", at.Add(-time.Duration(i)*spread.Tenth), at.Add(-24*time.Hour), 8))
	}
	// The counter is full; an hour on, every tenth but the hour's is past.
	later := at.Add(time.Hour)
	require.Equal(t, 0, c.Shard("q", later.Add(time.Second), later, 8))
	require.Equal(t, 1, c.Shard("q", later, later, 8), "the hour's tenth kept its one")
	require.Equal(t, 0, c.Shard("q", at, later, 8), "a past tenth was dropped")
}
