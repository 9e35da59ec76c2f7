package sessionstate

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// lateLog is the handler of the logger the State's background parts (the clock's
// measures, the toucher) write to. A State is made by whichever part asks first, and the
// package functions (CreateQueue, Pause, inspect) and parts configured without a Logger
// have none to give it: lateLog discards until a part that has one asks (For), so a
// client made after CreateQueue or a producer on the same driver still gets their
// warnings.
type lateLog struct {
	to    *atomic.Pointer[slog.Handler]
	shape []func(slog.Handler) slog.Handler // the WithAttrs and WithGroup calls, in order
}

func newLateLog(log *slog.Logger) *lateLog {
	l := &lateLog{to: &atomic.Pointer[slog.Handler]{}}
	l.set(log)
	return l
}

// set makes log's handler the destination, if none is set yet and log writes somewhere:
// the constructors give parts made without a Logger one that discards, which must not
// take the place of a real one given later.
func (l *lateLog) set(log *slog.Logger) {
	if log == nil {
		return
	}
	if h := log.Handler(); h != slog.DiscardHandler {
		l.to.CompareAndSwap(nil, &h)
	}
}

func (l *lateLog) handler() slog.Handler {
	p := l.to.Load()
	if p == nil {
		return nil
	}
	h := *p
	for _, f := range l.shape {
		h = f(h)
	}
	return h
}

func (l *lateLog) Enabled(ctx context.Context, level slog.Level) bool {
	h := l.handler()
	return h != nil && h.Enabled(ctx, level)
}

func (l *lateLog) Handle(ctx context.Context, r slog.Record) error {
	if h := l.handler(); h != nil {
		return h.Handle(ctx, r)
	}
	return nil
}

func (l *lateLog) WithAttrs(as []slog.Attr) slog.Handler {
	return l.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (l *lateLog) WithGroup(name string) slog.Handler {
	return l.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

func (l *lateLog) with(f func(slog.Handler) slog.Handler) slog.Handler {
	return &lateLog{to: l.to, shape: append(l.shape[:len(l.shape):len(l.shape)], f)}
}
