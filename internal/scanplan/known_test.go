package scanplan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/shard"
)

// A busy call counts the due rows of a partition of the current bucket from what its last
// peek saw coming due, while its signal cell shows no write since and KnowAhead has not
// passed; a take that took everything visible drops what it took; anything else, a write
// (the cell changed), a take cut or failed, a skip, sends the partition back to a peek.
func TestKnown(t *testing.T) {
	p := newTestPlan(t0, 0)
	cell := shard.NewID(at(-3))
	cells := Cells{{b0, 0}: cell}
	pt := part(b0, 0)
	other := part(b0, 1)

	// Nothing known yet: both are peeked.
	parts := []Part{pt, other}
	require.Equal(t, []int{0, 1}, p.Known(parts, []int{0, 1}, t0, cells))
	require.True(t, p.WantsCells(parts, t0), "a partition not dense may read ahead")

	// The peek at t0 saw rows coming due at +0.1, +0.3 and +0.5 s.
	p.Know(&pt, t0, t0.Add(KnowAhead), []time.Time{at(0.5), at(0.1), at(0.3)}, cells)
	p.Know(&other, t0, t0.Add(KnowAhead), nil, cells) // untouched: nothing coming

	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Empty(t, p.Known(parts, []int{0, 1}, at(0.35), cells))
	require.Equal(t, 2, parts[0].Avail)
	require.Equal(t, at(0.5), parts[0].Next)
	require.Equal(t, 0, parts[1].Avail)
	require.True(t, parts[1].Next.IsZero())

	// A take at +0.35 took both; the third comes due at +0.5.
	p.Consumed(&parts[0], at(0.35))
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Empty(t, p.Known(parts, []int{0, 1}, at(0.4), cells))
	require.Equal(t, 0, parts[0].Avail)
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Empty(t, p.Known(parts, []int{0, 1}, at(0.6), cells))
	require.Equal(t, 1, parts[0].Avail)

	// KnowAhead passed: peeked again.
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Equal(t, []int{0, 1}, p.Known(parts, []int{0, 1}, at(1.1), cells))

	// A write into shard 0 since the peek (its cell changed): shard 0 is peeked again.
	p.Know(&pt, t0, t0.Add(KnowAhead), []time.Time{at(0.5)}, cells)
	p.Know(&other, t0, t0.Add(KnowAhead), nil, cells)
	touched := Cells{{b0, 0}: shard.NewID(at(0.2))}
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Equal(t, []int{0}, p.Known(parts, []int{0, 1}, at(0.6), touched))
	// And so is a partition written into for the first time since (untouched before).
	touched[Cell{b0, 1}] = shard.NewID(at(0.2))
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Equal(t, []int{0, 1}, p.Known(parts, []int{0, 1}, at(0.6), touched))

	// Cells not read: everything is peeked; a skipped or forgotten partition too.
	p.Know(&pt, t0, t0.Add(KnowAhead), []time.Time{at(0.5)}, cells)
	p.Know(&other, t0, t0.Add(KnowAhead), nil, cells)
	require.Equal(t, []int{0, 1}, p.Known([]Part{part(b0, 0), part(b0, 1)}, []int{0, 1}, at(0.6), nil))
	p.Skipped(&pt, at(0.6))
	p.Forget(&other)
	require.Equal(t, []int{0, 1}, p.Known([]Part{part(b0, 0), part(b0, 1)}, []int{0, 1}, at(0.7), cells))

	// Only the current bucket's partitions are known, and a new bucket forgets the rest.
	old := part(b0-1, 0)
	p.Know(&old, t0, t0.Add(KnowAhead), nil, cells)
	require.Equal(t, []int{0}, p.Known([]Part{old}, []int{0}, t0, cells))
	p.Know(&pt, t0, t0.Add(KnowAhead), nil, cells)
	p.Advance(nil, t0.Add(10*time.Second))
	p.mu.Lock()
	require.Empty(t, p.known)
	p.mu.Unlock()

	// A dense partition is taken without a peek, assumed to hold PeekLimit, cells read or
	// not, and asks for no cells: with every partition of the bucket dense, none are read.
	p.Dense(&pt, true)
	parts = []Part{part(b0, 0), part(b0, 1)}
	require.Equal(t, []int{1}, p.Known(parts, []int{0, 1}, t0, nil))
	require.True(t, parts[0].Blind)
	require.Equal(t, PeekLimit, parts[0].Avail)
	require.Equal(t, t0, parts[0].Next, "a call that finds none after all comes back at once")
	require.False(t, parts[1].Blind)
	p.Dense(&other, true)
	require.False(t, p.WantsCells([]Part{part(b0, 0), part(b0, 1)}, t0))
	p.Dense(&other, false)
	require.True(t, p.WantsCells([]Part{part(b0, 0), part(b0, 1)}, t0))
	// A partition of an older bucket is peeked, dense or not.
	p.Dense(&old, true)
	require.Equal(t, []int{0}, p.Known([]Part{old}, []int{0}, t0, cells))
}
