// Package wakeup tells idle workers in this process that a producer in this process just
// scheduled a task, and when it is due, so they need not wait for their next poll.
package wakeup

import (
	"sync"
	"time"
)

// Sub is one subscription: C receives a signal when Earliest may have moved earlier.
type Sub struct {
	queue string
	C     chan struct{}

	mu       sync.Mutex
	earliest time.Time
}

var (
	mu   sync.Mutex
	subs = map[string]map[*Sub]struct{}{}
)

// Subscribe listens for tasks scheduled on queue. Call Cancel when done.
func Subscribe(queue string) *Sub {
	s := &Sub{queue: queue, C: make(chan struct{}, 1)}
	mu.Lock()
	defer mu.Unlock()
	if subs[queue] == nil {
		subs[queue] = map[*Sub]struct{}{}
	}
	subs[queue][s] = struct{}{}
	return s
}

// Cancel ends the subscription.
func (s *Sub) Cancel() {
	mu.Lock()
	defer mu.Unlock()
	delete(subs[s.queue], s)
	if len(subs[s.queue]) == 0 {
		delete(subs, s.queue)
	}
}

// Take returns the earliest due time notified since the last Take, or zero.
func (s *Sub) Take() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.earliest
	s.earliest = time.Time{}
	return t
}

// Notify tells queue's subscribers that a task due at due was scheduled.
func Notify(queue string, due time.Time) {
	mu.Lock()
	defer mu.Unlock()
	for s := range subs[queue] {
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
