// Package lwt holds what every lightweight transaction in shardq shares: the driver never
// retries one (a retry of an LWT whose outcome is unknown is a second, different
// decision), and unknown outcomes are settled by reading back at SERIAL.
package lwt

import (
	"context"
	"time"

	"github.com/gocql/gocql"
)

// NoRetry is set on every LWT, so the driver never retries one on its own.
var NoRetry gocql.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}

// Serial is the consistency of a read that completes any Paxos round in flight on the
// partition before it answers, so what it returns is the settled outcome.
const Serial = gocql.Consistency(gocql.Serial)

// ResolveTimeout bounds the read that settles an unknown outcome.
const ResolveTimeout = 10 * time.Second

// ResolveContext returns a context for settling an unknown outcome: it survives the
// caller's cancellation, because a caller that gave up still needs to know what happened.
func ResolveContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ResolveTimeout)
}
