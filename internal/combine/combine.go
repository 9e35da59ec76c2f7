// Package combine merges concurrent small writes to one partition into one unlogged
// batch. While a write to a partition is in flight, small writes to it that follow wait,
// and go together once it returns. A producer called once per task at thousands of tasks
// a second then sends a few requests per partition per round trip instead of one per
// task: each request costs the client a system call or two and the server a dispatch,
// whatever its size. Sparse calls find nothing in flight and go at once, so they wait
// for nothing.
package combine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Writer combines the writes made through it, each a list of rows of type T to one
// partition. It is safe for concurrent use.
type Writer[T any] struct {
	send              func(context.Context, []T) error
	maxRows, maxBytes int

	mu    sync.Mutex
	parts map[string][]*write[T] // partitions with a write in flight, and the writes waiting
}

type write[T any] struct {
	stmts    []T
	bytes    int
	deadline time.Time // the caller's, if any
	done     chan error
	sent     bool
}

// New returns a Writer that writes rows of one partition, merged or not, in one unlogged
// batch by send. Its batches hold at most maxRows rows and maxBytes of payload; a single
// write larger than either goes alone.
func New[T any](send func(context.Context, []T) error, maxRows, maxBytes int) *Writer[T] {
	return &Writer[T]{send: send, maxRows: maxRows, maxBytes: maxBytes, parts: map[string][]*write[T]{}}
}

// Write writes stmts, all to the partition key, in one unlogged batch, which may also
// hold other writes to key; bytes is their payload. It returns the batch's error. A
// write at half a batch's bounds or more goes at once on its own: merging could add at
// most one more, and bulk writes keep their parallelism. When ctx ends while the write
// waits, it is withdrawn and the error is ctx's; when it ends after the write was sent,
// the error is ctx's too and the write may still apply.
func (w *Writer[T]) Write(ctx context.Context, key string, stmts []T, bytes int) error {
	if 2*len(stmts) >= w.maxRows || 2*bytes >= w.maxBytes {
		return w.send(ctx, stmts)
	}
	w.mu.Lock()
	waiting, busy := w.parts[key]
	if !busy {
		w.parts[key] = nil
		w.mu.Unlock()
		defer w.next(key)
		return w.send(ctx, stmts)
	}
	wr := &write[T]{stmts: stmts, bytes: bytes, done: make(chan error, 1)}
	wr.deadline, _ = ctx.Deadline()
	w.parts[key] = append(waiting, wr)
	w.mu.Unlock()
	select {
	case err := <-wr.done:
		return err
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if wr.sent {
		select {
		case err := <-wr.done:
			return err
		default:
			return fmt.Errorf("combine: write to %s sent, outcome unknown: %w", key, ctx.Err())
		}
	}
	waiting = w.parts[key]
	for i, o := range waiting {
		if o == wr {
			w.parts[key] = append(waiting[:i:i], waiting[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// next hands the writes waiting for key, if any, to a goroutine of their own that sends
// them batch after batch; take marks key idle once none waits.
func (w *Writer[T]) next(key string) {
	batch := w.take(key)
	if batch == nil {
		return
	}
	go func() {
		for ; batch != nil; batch = w.take(key) {
			w.flush(batch)
		}
	}()
}

// flush sends batch, merged, and hands each of its writes the result. No one caller owns
// a merged batch, so a cancelled caller does not stop it; but it is sent by the earliest
// deadline among them, which callers may rest on (a unique key's claim is good for a
// bounded time). When that deadline ends the batch, the writes of callers whose own
// deadline is later are sent again on their own, under it: one caller's short deadline
// must not leave another's write unconfirmed. Statements are idempotent (task rows carry
// their write timestamp), so sending one twice writes it once.
func (w *Writer[T]) flush(batch []*write[T]) {
	var stmts []T
	var deadline time.Time
	for _, wr := range batch {
		stmts = append(stmts, wr.stmts...)
		if !wr.deadline.IsZero() && (deadline.IsZero() || wr.deadline.Before(deadline)) {
			deadline = wr.deadline
		}
	}
	err := w.sendBy(deadline, stmts)
	for _, wr := range batch {
		if err != nil && errors.Is(err, context.DeadlineExceeded) && wr.deadline != deadline {
			wr.done <- w.sendBy(wr.deadline, wr.stmts)
			continue
		}
		wr.done <- err
	}
}

// sendBy sends stmts by deadline, if any.
func (w *Writer[T]) sendBy(deadline time.Time, stmts []T) error {
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return w.send(ctx, stmts)
}

// take removes the longest run of waiting writes for key that fits one batch and marks it
// sent; with none waiting, it marks key idle and returns nil.
func (w *Writer[T]) take(key string) []*write[T] {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiting := w.parts[key]
	if len(waiting) == 0 {
		delete(w.parts, key)
		return nil
	}
	n, rows, bytes := 0, 0, 0
	for _, wr := range waiting {
		if n > 0 && (rows+len(wr.stmts) > w.maxRows || bytes+wr.bytes > w.maxBytes) {
			break
		}
		wr.sent = true
		n, rows, bytes = n+1, rows+len(wr.stmts), bytes+wr.bytes
	}
	w.parts[key] = waiting[n:]
	return waiting[:n:n]
}
