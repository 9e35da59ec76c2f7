// Package hostpolicy routes requests of the Apache Cassandra GoCQL driver v2 away from
// nodes that stopped answering. It is internal/hostpolicy, which does the same for
// github.com/gocql/gocql, ported to v2's HostSelectionPolicy; see that package for why a
// frozen node needs routing around. Both keep their bookkeeping in package health, and
// translate their driver's hosts, statements and errors for it.
//
// Wrap keeps the order of the policy it wraps, except that a node goes behind the others
// while it has had a request outstanding for longer than Config.Slow without answering
// anything since, and after each request it never answered (timed out, lost with its
// connection, or abandoned for a speculative copy) for a while that doubles each time,
// from Config.Backoff up to Config.MaxBackoff. Then one read that may be sent
// speculatively tries it first; any answer puts it back in line. A node that is merely
// busy keeps answering, so it keeps its place.
//
// v2 retries a request only when it is idempotent, so the adapter marks every request it
// lets the driver retry idempotent, writes included, where v1 marked only the reads it
// sends speculatively. What the policy needs to know is whether a request may run on two
// nodes at once, which concurrent tells from the request itself.
package hostpolicy

import (
	"context"
	"errors"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
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

// concurrent reports whether qry may run on two nodes at once: an idempotent read, not
// at SERIAL (the reads the adapter may send speculatively). A request gocql gives
// without its statement counts as its idempotence says.
func concurrent(qry gocql.ExecutableStatement) bool {
	if qry == nil || !qry.IsIdempotent() {
		return false
	}
	switch st := qry.Statement().(type) {
	case *gocql.Batch:
		return false
	case *gocql.Query:
		if c := st.GetConsistency(); c == gocql.Serial || c == gocql.LocalSerial {
			return false
		}
		s := strings.TrimSpace(st.Statement())
		return len(s) >= 6 && strings.EqualFold(s[:6], "SELECT")
	}
	return true
}

// policy is the inner policy with Pick, and the methods of health.Base (AddHost,
// AddHosts, RemoveHost, Init, Ready), in place of its own. passOn puts the inner policy
// one level deeper than Base, so that those of Base win and its other methods pass
// through. (The token aware policy's notice of a schema refresh is an unexported method,
// which no wrapper can pass on: gocql then tells the wrapper of each keyspace that
// changed instead, and KeyspaceChanged passes that on.)
type policy struct {
	health.Base[*gocql.HostInfo, gocql.Session]
	passOn
}

// passOn holds the policy Wrap wraps.
type passOn struct{ gocql.HostSelectionPolicy }

func (p *policy) Pick(qry gocql.ExecutableStatement) gocql.NextHost {
	var ctx func() context.Context
	if c, ok := qry.(interface{ Context() context.Context }); ok {
		ctx = c.Context
	}
	req := p.Request(concurrent(qry), ctx)
	return health.Line(req, p.HostSelectionPolicy.Pick(qry), hand)
}

// hand ties h to the attempt a about to be made on it, for its outcome to reach the
// policy as well as the inner one.
func hand(h gocql.SelectedHost, a *health.Attempt) gocql.SelectedHost {
	return health.Track(h, a, lost)
}

// lost reports whether err is one of v2's own errors for a request its node never
// answered; health counts network errors as well.
func lost(err error) bool {
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed)
}

// Speculate reports whether s may send reads speculatively: a policy of Wrap serves it
// (gocql alone fails a speculative read whose copy finds no node left) and knows a second
// node to send a copy to.
func Speculate(s *gocql.Session) bool { return health.Several(s) }
