package producer

import (
	"context"
	"sync"
)

// turns lets one caller at a time through per key, in a rough arrival order. Cancel and
// Reschedule take a partition's lock with a lightweight transaction; calls of one
// producer for the same partition wait their turn here instead, where waiting costs no
// request and no Paxos round that would only contend with theirs and the consumers'.
type turns struct {
	mu   sync.Mutex
	keys map[string]*turn
}

type turn struct {
	ch   chan struct{} // holds a value while someone has the turn
	refs int
}

// take waits for key's turn and returns the func that ends it.
func (t *turns) take(ctx context.Context, key string) (done func(), err error) {
	t.mu.Lock()
	if t.keys == nil {
		t.keys = map[string]*turn{}
	}
	k := t.keys[key]
	if k == nil {
		k = &turn{ch: make(chan struct{}, 1)}
		t.keys[key] = k
	}
	k.refs++
	t.mu.Unlock()
	release := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if k.refs--; k.refs == 0 {
			delete(t.keys, key)
		}
	}
	select {
	case k.ch <- struct{}{}:
		return func() { <-k.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
