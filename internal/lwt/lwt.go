// Package lwt holds what every lightweight transaction in shardq shares: the driver never
// retries one (driver.Once), a failure is either definite or leaves the outcome unknown, and an unknown
// outcome is settled by reading back at SERIAL.
package lwt

import (
	"context"
	"errors"
	"time"

	"github.com/shardq/shardq/internal/driver"
)

// ResolveTimeout bounds the read that settles an unknown outcome.
const ResolveTimeout = 10 * time.Second

// ErrOutcomeUnknown means a conditional write failed in a way that leaves open whether
// it applied, and reading back could not settle it. The packages that send LWTs return
// errors that match it (consumer.ErrOutcomeUnknown and lock.ErrOutcomeUnknown are it).
var ErrOutcomeUnknown = errors.New("shardq: outcome unknown")

// ResolveContext returns a context for settling an unknown outcome: it survives the
// caller's cancellation, because a caller that gave up still needs to know what happened,
// but not a time set by SettleBy.
func ResolveContext(ctx context.Context) (context.Context, context.CancelFunc) {
	at := time.Now().Add(ResolveTimeout)
	if by, ok := ctx.Value(settleByKey{}).(time.Time); ok && by.Before(at) {
		at = by
	}
	return context.WithDeadline(context.WithoutCancel(ctx), at)
}

type settleByKey struct{}

// SettleBy returns ctx under which unknown outcomes are settled by t or left unsettled,
// for a caller that must be done by t. What is left unsettled waits for its timeout: a
// lease or a lock that was written expires, and its tasks come back.
func SettleBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, settleByKey{}, t)
}

// Definite reports whether err says for certain that a request was not applied: the
// coordinator refused it before anything was written. An error that wraps
// ErrOutcomeUnknown is never definite, whatever else it wraps: a settle that failed
// carries both its cause and the refused read or release that left it unsettled.
func Definite(err error) bool {
	return !errors.Is(err, ErrOutcomeUnknown) && driver.NotApplied(err)
}

// Apply runs a conditional write and decides it. write sends the LWT (with NoRetry) and
// reports whether it applied. When it fails definitely, Apply returns its error; when the
// outcome is unknown, settle is called with a context that outlives ctx (ResolveContext)
// and the cause, and decides: it must first void a straggling request where one could
// still apply after a SERIAL read, then read back at SERIAL.
func Apply(ctx context.Context, write func(context.Context) (bool, error),
	settle func(ctx context.Context, cause error) (bool, error)) (bool, error) {
	applied, err := write(ctx)
	switch {
	case err == nil:
		return applied, nil
	case Definite(err):
		return false, err
	}
	rctx, cancel := ResolveContext(ctx)
	defer cancel()
	return settle(rctx, err)
}
