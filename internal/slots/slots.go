// Package slots shares a client's handlers among its queues: a queue's worker takes a
// slot for each task it leases and gives it back when the task's handler is done, so the
// client never holds more tasks than it has slots. Freed slots go by the queues' order:
// strictly by weight, or in proportion to it.
package slots

import (
	"context"
	"sync"
)

// Order is how freed slots are shared among waiting queues.
type Order int

const (
	// Weighted gives each waiting queue freed slots in proportion to its weight (smooth
	// weighted round robin), so no queue with tasks due waits for long.
	Weighted Order = iota
	// Strict gives freed slots to the queue of the highest weight that has tasks due: a
	// queue waits for as long as one above it has tasks due and handlers to run them.
	Strict
)

// Queue is one queue's part in a pool.
type Queue struct {
	// Weight is its share (Weighted) or rank (Strict); 0 or less weighs 1.
	Weight int
	// Cap is the most slots it can use at once: its handlers.
	Cap int
}

// Pool is a count of slots that several queues' workers share. Safe for concurrent use.
type Pool struct {
	order  Order
	queues map[string]Queue

	mu      sync.Mutex
	free    int
	current map[string]int // Weighted's running credit of each queue
	waiting map[string]*waiter
	held    map[string]int // slots granted and not released, per queue
	// hungry marks the queues that may have tasks due: from their worker's start, and from
	// each Acquire until a fetch finds less than it asked for (Idle). Strict holds freed
	// slots back from a lower queue while a higher one is hungry and could use them, even
	// between two of its fetches.
	hungry map[string]bool
}

// waiter is one worker's wish for up to want slots, of which it was granted got.
type waiter struct {
	want, got int
	ready     chan struct{} // closed once got > 0
}

// New returns a pool of size slots shared by queues, each hungry until it is Idle.
func New(size int, order Order, queues map[string]Queue) *Pool {
	qs := make(map[string]Queue, len(queues))
	hungry := make(map[string]bool, len(queues))
	for name, q := range queues {
		q.Weight = max(q.Weight, 1)
		qs[name], hungry[name] = q, true
	}
	return &Pool{order: order, queues: qs, free: size, current: map[string]int{}, waiting: map[string]*waiter{},
		held: map[string]int{}, hungry: hungry}
}

// Acquire takes between 1 and want slots for queue, waiting until one is free and it is
// queue's turn. It returns 0 when ctx ends or stop closes first. One worker per queue
// acquires at a time.
func (p *Pool) Acquire(ctx context.Context, queue string, want int, stop <-chan struct{}) int {
	p.mu.Lock()
	w := &waiter{want: want, ready: make(chan struct{})}
	p.waiting[queue] = w
	p.hungry[queue] = true
	p.grant()
	p.mu.Unlock()
	select {
	case <-w.ready:
	case <-ctx.Done():
	case <-stop:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, queue)
	select {
	case <-w.ready:
	default:
		return 0
	}
	select {
	case <-ctx.Done():
	case <-stop:
	default:
		return w.got
	}
	// Granted, but the caller gives up: the slots go to the others.
	p.free += w.got
	p.held[queue] -= w.got
	p.hungry[queue] = false
	p.grant()
	return 0
}

// Release gives back n slots of queue.
func (p *Pool) Release(queue string, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free += n
	p.held[queue] -= n
	p.grant()
}

// Idle tells that queue has no task due that its worker could take: its last fetch found
// fewer than it asked for, failed, or it stopped fetching.
func (p *Pool) Idle(queue string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hungry[queue] = false
	p.grant()
}

// grant hands free slots to waiters, one at a time, by the pool's order, and wakes
// those granted some. p.mu is held.
func (p *Pool) grant() {
	for p.free > 0 {
		q := p.next()
		if q == "" {
			return
		}
		w := p.waiting[q]
		w.got++
		p.free--
		p.held[q]++
		if w.got == 1 {
			close(w.ready)
		}
		if w.got == w.want {
			// Satisfied: it takes no more until it asks again.
			delete(p.waiting, q)
		}
	}
}

// next is the waiting queue whose turn it is, or "" when none waits. Weighted is smooth
// weighted round robin: each waiter gains its weight, the one with the most credit is
// served and pays the sum of the waiters' weights. p.mu is held.
func (p *Pool) next() string {
	best, sum := "", 0
	for q := range p.waiting {
		if p.order == Weighted {
			p.current[q] += p.weight(q)
			sum += p.weight(q)
		}
		if best == "" || p.ahead(q, best) {
			best = q
		}
	}
	switch {
	case best == "":
	case p.order == Weighted:
		p.current[best] -= sum
	case p.blocked(best):
		return ""
	}
	return best
}

// blocked reports whether a queue above q in Strict order is hungry and could use a slot,
// though it is not waiting for one right now (it is fetching, say): the slot waits for it.
func (p *Pool) blocked(q string) bool {
	for h, spec := range p.queues {
		if spec.Weight > p.weight(q) && p.hungry[h] && p.held[h] < spec.Cap {
			return true
		}
	}
	return false
}

// ahead reports whether queue q goes before queue than: by weight when Strict, by credit
// when Weighted, then by name.
func (p *Pool) ahead(q, than string) bool {
	a, b := p.weight(q), p.weight(than)
	if p.order == Weighted {
		a, b = p.current[q], p.current[than]
	}
	return a > b || a == b && q < than
}

// weight is queue's weight.
func (p *Pool) weight(queue string) int {
	if q, ok := p.queues[queue]; ok {
		return q.Weight
	}
	return 1
}
