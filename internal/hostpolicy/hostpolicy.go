// Package hostpolicy routes requests away from Cassandra nodes that stopped answering.
//
// A node that freezes (a long stop-the-world pause, a suspended VM, SIGSTOP) keeps its
// connections open and its peers see it up for many seconds, so the driver keeps it up too
// and keeps sending it requests, each of which waits for the driver's whole timeout. A
// token-aware policy sends every request of a partition to its first replica first, so
// the partitions that replica leads stop. Wrap keeps the order of the policy it wraps,
// except that a node goes behind the others while it has had a request outstanding for
// longer than Config.Slow without answering anything since, and after each request it
// never answered (timed out, lost with its connection, or abandoned for a speculative
// copy) for a while that doubles each time, from Config.Backoff up to Config.MaxBackoff.
// Then one idempotent request (a read, which gocql can send speculatively to the next
// node as well) tries it first; any answer puts it back in line. A node that is merely
// busy keeps answering, so it keeps its place.
//
// The bookkeeping is package health, which the wrapper for the Apache Cassandra GoCQL
// driver v2 shares; this package translates gocql's hosts, queries and errors for it.
package hostpolicy

import (
	"context"
	"errors"

	"github.com/gocql/gocql"
	"github.com/shardq/shardq/internal/hostpolicy/health"
)

// Config says when a node counts as not answering.
type Config = health.Config

// Wrap returns a policy that orders nodes as inner does, behind those that answer
// promptly. Like gocql's policies, it serves one session. Wrapping a policy Wrap returned
// gives it back unchanged.
func Wrap(inner gocql.HostSelectionPolicy, cfg Config) gocql.HostSelectionPolicy {
	if p, ok := inner.(*policy); ok {
		return p
	}
	return &policy{Base: health.NewBase(inner, cfg), passOn: passOn{inner}}
}

// policy is the inner policy with Pick, and the methods of health.Base (AddHost,
// AddHosts, RemoveHost, Init, Ready), in place of its own. passOn puts the inner policy
// one level deeper than Base, so that those of Base win and its other methods pass
// through.
type policy struct {
	health.Base[*gocql.HostInfo, gocql.Session]
	passOn
}

// passOn holds the policy Wrap wraps.
type passOn struct{ gocql.HostSelectionPolicy }

func (p *policy) Pick(qry gocql.ExecutableQuery) gocql.NextHost {
	var ctx func() context.Context
	if qry != nil {
		ctx = qry.Context
	}
	// gocql runs a query on two nodes at once only when it is idempotent.
	req := p.Request(qry != nil && qry.IsIdempotent(), ctx)
	return health.Line(req, p.HostSelectionPolicy.Pick(qry), hand)
}

// hand ties h to the attempt a about to be made on it, for its outcome to reach the
// policy as well as the inner one.
func hand(h gocql.SelectedHost, a *health.Attempt) gocql.SelectedHost {
	return health.Track(h, a, lost)
}

// lost reports whether err is one of gocql's own errors for a request its node never
// answered; health counts network errors as well.
func lost(err error) bool {
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed)
}

// Speculate reports whether s may send reads speculatively: a policy of Wrap serves it
// (gocql alone fails a speculative read whose copy finds no node left) and knows a second
// node to send a copy to.
func Speculate(s *gocql.Session) bool { return health.Several(s) }
