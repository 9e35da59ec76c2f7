package slots

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wait registers queue as waiting for want slots, as Acquire does, without blocking.
func wait(p *Pool, queue string, want int) *waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &waiter{want: want, ready: make(chan struct{})}
	p.waiting[queue] = w
	return w
}

// Strict serves the heaviest waiter first, and a lighter one only once it is satisfied.
func TestStrictServesTheHeaviestFirst(t *testing.T) {
	t.Parallel()
	p := New(0, Strict, map[string]Queue{"high": {Weight: 3, Cap: 2}, "mid": {Weight: 2, Cap: 5}, "low": {Weight: 1, Cap: 5}})
	low, high, mid := wait(p, "low", 5), wait(p, "high", 2), wait(p, "mid", 5)
	p.Release("", 3)
	require.Equal(t, 2, high.got, "high first")
	require.Equal(t, 1, mid.got, "high is at its cap: mid next")
	require.Zero(t, low.got)
	p.Release("", 10)
	require.Equal(t, 5, mid.got)
	require.Equal(t, 5, low.got)
	require.Equal(t, 1, p.free)
}

// Under Strict, a slot freed while a higher queue is between two fetches (hungry, below
// its cap, not waiting) waits for it rather than going to a lower queue; once the higher
// queue is idle, the lower one gets it.
func TestStrictHoldsSlotsForAHungryHigherQueue(t *testing.T) {
	t.Parallel()
	p := New(1, Strict, map[string]Queue{"high": {Weight: 2, Cap: 4}, "low": {Weight: 1, Cap: 4}})
	low := wait(p, "low", 2)
	p.Release("", 0)
	p.mu.Lock()
	p.grant()
	p.mu.Unlock()
	require.Zero(t, low.got, "high has not fetched yet")
	p.Idle("high")
	require.Equal(t, 1, low.got)
}

// Weighted shares slots in proportion to weight among the queues waiting.
func TestWeightedSharesByWeight(t *testing.T) {
	t.Parallel()
	p := New(0, Weighted, map[string]Queue{"a": {Weight: 3, Cap: 1000}, "b": {Weight: 1, Cap: 1000}})
	a, b := wait(p, "a", 1000), wait(p, "b", 1000)
	p.Release("", 400)
	require.Equal(t, 300, a.got)
	require.Equal(t, 100, b.got)
	c := wait(p, "c", 1000) // unweighted: 1
	p.Release("", 500)
	require.Equal(t, 300+300, a.got)
	require.Equal(t, 100+100, b.got)
	require.Equal(t, 100, c.got)
}

// Acquire returns what it was granted, and a caller that gives up returns its grant to
// the others.
func TestAcquire(t *testing.T) {
	t.Parallel()
	p := New(3, Strict, nil)
	require.Equal(t, 2, p.Acquire(context.Background(), "a", 2, nil))
	require.Equal(t, 1, p.Acquire(context.Background(), "b", 5, nil), "what is free, at least one")

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int)
	go func() { got <- p.Acquire(ctx, "c", 1, nil) }()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiting["c"] != nil
	}, waitFor, tick)
	cancel()
	require.Zero(t, <-got)
	p.Release("a", 2)
	p.Release("b", 1)
	require.Equal(t, 3, p.free, "nothing is held for a caller that gave up")
	stop := make(chan struct{})
	close(stop)
	p = New(0, Strict, nil)
	require.Zero(t, p.Acquire(context.Background(), "d", 1, stop))
}

const (
	waitFor = 10 * time.Second
	tick    = time.Millisecond
)
