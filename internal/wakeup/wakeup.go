// Package wakeup tells idle workers in this process that a producer in this process just
// scheduled a task, and when it is due, so they need not wait for their next poll. A Bus
// serves one session (internal/sessionstate), so queues of the same name in two keyspaces
// do not wake each other.
package wakeup

import (
	"sync"
	"time"
)

// Bus carries wake-ups between the producers and workers of one session.
type Bus struct {
	mu    sync.Mutex
	subs  map[string]map[*Sub]struct{}
	woken map[string]uint64 // wake-ups per queue, for Woken
}

// Woken returns how many wake-ups queue has had: a consumer that sees it change knows a
// producer of this process wrote rows since, whose touches may still be on their way.
func (b *Bus) Woken(queue string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.woken[queue]
}

// Sub is one subscription: C receives a signal when Earliest may have moved earlier.
type Sub struct {
	bus   *Bus
	queue string
	C     chan struct{}

	mu       sync.Mutex
	earliest time.Time
}

// Subscribe listens for tasks scheduled on queue. Call Cancel when done.
func (b *Bus) Subscribe(queue string) *Sub {
	s := &Sub{bus: b, queue: queue, C: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[string]map[*Sub]struct{}{}
	}
	if b.subs[queue] == nil {
		b.subs[queue] = map[*Sub]struct{}{}
	}
	b.subs[queue][s] = struct{}{}
	return s
}

// Cancel ends the subscription.
func (s *Sub) Cancel() {
	b := s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs[s.queue], s)
	if len(b.subs[s.queue]) == 0 {
		delete(b.subs, s.queue)
	}
}

// Take returns the earliest due time woken for since the last Take, or zero.
func (s *Sub) Take() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.earliest
	s.earliest = time.Time{}
	return t
}

// Wake tells queue's subscribers that a task due at due was scheduled.
func (b *Bus) Wake(queue string, due time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.woken == nil {
		b.woken = map[string]uint64{}
	}
	b.woken[queue]++
	b.wake(queue, due)
}

// Signalled tells queue's subscribers that a process's signal touch, read from the store,
// announced a row visible at due. Unlike Wake it leaves Woken as it is: the touch is
// already there for the consumer to read.
func (b *Bus) Signalled(queue string, due time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wake(queue, due)
}

// wake signals queue's subscribers for due. b.mu is held.
func (b *Bus) wake(queue string, due time.Time) {
	for s := range b.subs[queue] {
		s.mu.Lock()
		if s.earliest.IsZero() || due.Before(s.earliest) {
			s.earliest = due
		}
		s.mu.Unlock()
		select {
		case s.C <- struct{}{}:
		default: // a signal is already pending; Take will see the earliest time
		}
	}
}
