// Package lwt holds what every lightweight transaction in shardq shares: the driver never
// retries one (a retry of an LWT whose outcome is unknown is a second, different
// decision), a failure is either definite or leaves the outcome unknown, and an unknown
// outcome is settled by reading back at SERIAL.
package lwt

import (
	"context"
	"errors"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/hostpolicy"
)

// NoRetry is set on every LWT, so the driver never retries one on its own.
var NoRetry gocql.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}

// Serial is the consistency of a read that completes any Paxos round in flight on the
// partition before it answers, so what it returns is the settled outcome.
const Serial = gocql.Consistency(gocql.Serial)

// SerialRead makes q, a read of session, a read at Serial, which is never copied to a
// second node on a delay (that copy's Paxos round would contend with the first) nor
// chosen as the probe of a node thought frozen (internal/hostpolicy). Where the session
// is RecommendedCluster's and knows more than one node, its retry policy sends one that
// failed to the next node; otherwise SerialRetry does, but sends one that timed out to
// the same node again.
func SerialRead(session *gocql.Session, q *gocql.Query) *gocql.Query {
	q = q.Consistency(Serial).SetSpeculativeExecutionPolicy(gocql.NonSpeculativeExecution{}).Idempotent(false)
	if !hostpolicy.Speculate(session) {
		q = q.RetryPolicy(SerialRetry)
	}
	return q
}

// SerialRetry sends a read at Serial that failed again, up to twice: to the same node when
// it timed out, to the next one otherwise. Such a read changes nothing but completing a
// round already under way, and the outcomes it settles are otherwise left unknown: one
// busy moment of a one-node cluster, where the driver has no other node to try, failed
// the settle of a queue's creation and of an ack batch.
var SerialRetry gocql.RetryPolicy = serialRetry{}

type serialRetry struct{}

func (serialRetry) Attempt(q gocql.RetryableQuery) bool { return q.Attempts() <= 2 }

func (serialRetry) GetRetryType(err error) gocql.RetryType {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return gocql.Rethrow // the caller gave up (gocql returns before asking)
	case cql.TimedOut(err):
		return gocql.Retry
	}
	return gocql.RetryNextHost
}

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
	var re gocql.RequestError
	if errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &re) {
		return false
	}
	switch re.Code() {
	case gocql.ErrCodeInvalid, gocql.ErrCodeSyntax, gocql.ErrCodeUnavailable, gocql.ErrCodeUnauthorized,
		gocql.ErrCodeConfig, gocql.ErrCodeOverloaded, gocql.ErrCodeCredentials, gocql.ErrCodeProtocol:
		return true
	}
	return false
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

// Batch runs a conditional batch and reports whether it applied, closing its iterator.
// A batch that did not apply returns the current values of the rows it conditioned on,
// which are read and dropped.
func Batch(session *gocql.Session, b *gocql.Batch) (bool, error) {
	b.RetryPolicy(NoRetry)
	applied, iter, err := session.MapExecuteBatchCAS(b, map[string]any{})
	if err == nil {
		err = iter.Close()
	}
	return applied, err
}
