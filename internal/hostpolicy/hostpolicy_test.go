package hostpolicy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"
)

// The bookkeeping is tested in package health; these tests check what the wrapper tells
// it of gocql's hosts, queries and errors.

// node is a node gocql knows by its host ID and address.
func node(id string, ip byte) *gocql.HostInfo {
	h := (&gocql.HostInfo{}).SetConnectAddress(net.IPv4(10, 0, 0, ip))
	h.SetHostID(id)
	return h
}

// query is a query as gocql hands it to the policy.
type query struct {
	gocql.ExecutableQuery
	idempotent bool
	ctx        context.Context
}

func (q query) IsIdempotent() bool { return q.idempotent }

func (q query) Context() context.Context {
	if q.ctx == nil {
		return context.Background()
	}
	return q.ctx
}

// read is a query gocql may run on two nodes at once.
var read = query{idempotent: true}

// roundRobin wraps gocql's round robin policy over nodes a and b, which starts each line
// at the node after the one the line before started at.
func roundRobin(cfg Config) gocql.HostSelectionPolicy {
	p := Wrap(gocql.RoundRobinHostPolicy(), cfg)
	// gocql tells the nodes it knows at the start in one call.
	p.(interface{ AddHosts([]*gocql.HostInfo) }).AddHosts([]*gocql.HostInfo{node("a", 1), node("b", 2)})
	return p
}

// attempt is the attempt of qry on the node id.
func attempt(p gocql.HostSelectionPolicy, qry gocql.ExecutableQuery, id string) gocql.SelectedHost {
	next := p.Pick(qry)
	for h := next(); h != nil; h = next() {
		if h.Info().HostID() == id {
			return h
		}
	}
	panic("no attempt on " + id)
}

// behind reports whether a goes behind b in the lines of reads, which would start with
// each node in turn otherwise.
func behind(p gocql.HostSelectionPolicy) bool {
	for range 2 {
		if p.Pick(read)().Info().HostID() == "a" {
			return false
		}
	}
	return true
}

// gocql reports a request its node never answered as ErrTimeoutNoResponse or
// ErrConnectionClosed, and an answer that is an error as another error.
func TestMarkTellsGocqlsErrors(t *testing.T) {
	p := roundRobin(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	require.False(t, behind(p))
	for _, err := range []error{gocql.ErrTimeoutNoResponse, gocql.ErrConnectionClosed} {
		attempt(p, read, "a").Mark(err)
		require.True(t, behind(p), "after %v", err)
		attempt(p, read, "a").Mark(&gocql.RequestErrUnavailable{})
		require.False(t, behind(p), "an answer puts it back in line")
	}
}

// gocql reports an attempt cancelled as an answer, with a nil error; the query's
// context tells them apart.
func TestCancelledQueryIsNoAnswer(t *testing.T) {
	p := roundRobin(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	attempt(p, read, "a").Mark(gocql.ErrTimeoutNoResponse)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	attempt(p, query{idempotent: true, ctx: ctx}, "a").Mark(nil)
	require.True(t, behind(p))
	attempt(p, read, "a").Mark(nil)
	require.False(t, behind(p))
}

// gocql runs a query on two nodes at once only when it is idempotent: only then may a
// line give its first node again.
func TestOnlyIdempotentQueriesRunTwice(t *testing.T) {
	p := Wrap(gocql.RoundRobinHostPolicy(), Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	a := node("a", 1)
	p.AddHost(a)
	for _, c := range []struct {
		qry   gocql.ExecutableQuery
		twice bool
	}{{read, true}, {query{}, false}, {nil, false}} {
		next := p.Pick(c.qry)
		require.Same(t, a, next().Info())
		require.Equal(t, c.twice, next() != nil, "%+v", c.qry)
	}
}

// Wrapping twice wraps once, and Speculate tells the sessions a policy of Wrap serves
// that knows a second node.
func TestWrap(t *testing.T) {
	p := Wrap(gocql.RoundRobinHostPolicy(), Config{})
	require.Same(t, p, Wrap(p, Config{}))
	require.True(t, p.(gocql.ReadyPolicy).Ready())
	s := new(gocql.Session)
	p.Init(s)
	p.AddHost(node("a", 1))
	require.False(t, Speculate(s), "one node")
	p.AddHost(node("b", 2))
	require.True(t, Speculate(s))
	p.RemoveHost(node("a", 1))
	require.False(t, Speculate(s))
	require.False(t, Speculate(new(gocql.Session)), "no policy of Wrap serves it")
}
