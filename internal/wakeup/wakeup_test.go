package wakeup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/wakeup"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// pending reports whether s has a signal waiting, without waiting for one.
func pending(s *wakeup.Sub) bool {
	select {
	case <-s.C:
		return true
	default:
		return false
	}
}

func TestWakeTakeEarliest(t *testing.T) {
	t.Parallel()
	var bus wakeup.Bus
	s := bus.Subscribe("q")
	defer s.Cancel()
	require.False(t, pending(s))
	require.True(t, s.Take().IsZero(), "nothing woken yet")

	for _, due := range []time.Time{t0.Add(2 * time.Second), t0, t0.Add(time.Second)} {
		bus.Wake("q", due)
	}
	require.True(t, pending(s))
	require.False(t, pending(s), "three wake-ups leave one signal")
	require.Equal(t, t0, s.Take(), "the earliest of the three")
	require.True(t, s.Take().IsZero(), "Take clears what it returned")

	bus.Wake("q", t0.Add(time.Hour))
	require.True(t, pending(s))
	require.Equal(t, t0.Add(time.Hour), s.Take(), "after a Take, a later time is not held back by the earlier one")
}

func TestWakeReachesEverySubscriberOfItsQueueOnly(t *testing.T) {
	t.Parallel()
	var bus wakeup.Bus
	a, b := bus.Subscribe("q"), bus.Subscribe("q")
	other := bus.Subscribe("q" + "/other")
	defer a.Cancel()
	defer b.Cancel()
	defer other.Cancel()

	bus.Wake("q", t0)
	for _, s := range []*wakeup.Sub{a, b} {
		require.True(t, pending(s))
		require.Equal(t, t0, s.Take())
	}
	require.False(t, pending(other))
	require.True(t, other.Take().IsZero())
}

func TestCancelStopsDelivery(t *testing.T) {
	t.Parallel()
	var bus wakeup.Bus
	gone, stays := bus.Subscribe("q"), bus.Subscribe("q")
	defer stays.Cancel()
	gone.Cancel()

	bus.Wake("q", t0)
	require.False(t, pending(gone))
	require.True(t, gone.Take().IsZero())
	require.True(t, pending(stays), "cancelling one subscription leaves the others")

	stays.Cancel()
	bus.Wake("q", t0) // no subscriber left: a no-op
	require.False(t, pending(stays))
}

// TestWakeDoesNotBlock wakes a subscriber that never reads its channel: Wake must
// return every time, the producer calling it being on its write path.
func TestWakeDoesNotBlock(t *testing.T) {
	t.Parallel()
	var bus wakeup.Bus
	s := bus.Subscribe("q")
	defer s.Cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			bus.Wake("q", t0.Add(-time.Duration(i)*time.Second))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wake blocked on a subscriber with a signal pending")
	}
	require.True(t, pending(s))
	require.Equal(t, t0.Add(-99*time.Second), s.Take())
}

// Two sessions (two keyspaces) with a queue of the same name do not wake each other.
func TestBusesDoNotShareQueues(t *testing.T) {
	t.Parallel()
	var a, b wakeup.Bus
	sa, sb := a.Subscribe("q"), b.Subscribe("q")
	defer sa.Cancel()
	defer sb.Cancel()
	a.Wake("q", t0)
	require.True(t, pending(sa))
	require.False(t, pending(sb))
	require.True(t, sb.Take().IsZero())
}
