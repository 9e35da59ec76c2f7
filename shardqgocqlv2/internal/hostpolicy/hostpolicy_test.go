package hostpolicy

import (
	"context"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"
)

// The bookkeeping is tested in package health; these tests check what the wrapper tells
// it of v2's hosts, statements and errors.

// fixed is an inner policy whose line is always hosts, in order; a nil host is a node
// the policy does not name. (v2 gives no way to set a host ID outside the driver, so every
// HostInfo of these tests is the same node to the policy.)
type fixed struct {
	gocql.HostSelectionPolicy
	hosts []*gocql.HostInfo
}

func (f fixed) Pick(gocql.ExecutableStatement) gocql.NextHost {
	line := f.hosts
	return func() gocql.SelectedHost {
		if len(line) == 0 {
			return nil
		}
		h := line[0]
		line = line[1:]
		return picked{h}
	}
}

type picked struct{ h *gocql.HostInfo }

func (p picked) Info() *gocql.HostInfo { return p.h }
func (p picked) Mark(error)            {}

// stmt is a statement as gocql hands it to the policy.
type stmt struct {
	gocql.ExecutableStatement
	idempotent bool
	st         gocql.Statement
	ctx        context.Context
}

func (r stmt) IsIdempotent() bool         { return r.idempotent }
func (r stmt) Statement() gocql.Statement { return r.st }

func (r stmt) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// bare is a statement that gives no context.
type bare struct{ gocql.ExecutableStatement }

// read is an idempotent query whose statement gocql does not give: one that may run on
// two nodes at once.
var read = stmt{idempotent: true}

// v2 reports a request its node never answered as ErrTimeoutNoResponse or
// ErrConnectionClosed, an answer that is an error as another error, and an attempt
// cancelled as an answer, with a nil error, which the statement's context, when it
// gives one, tells apart.
func TestMarkTellsV2sErrors(t *testing.T) {
	h := &gocql.HostInfo{}
	p := Wrap(fixed{hosts: []*gocql.HostInfo{h, nil}}, Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	// behind reports whether h goes behind the node the inner policy does not name.
	behind := func() bool { return p.Pick(read)().Info() == nil }
	require.False(t, behind())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		qry    gocql.ExecutableStatement
		err    error
		behind bool
	}{
		{read, gocql.ErrTimeoutNoResponse, true},
		{read, nil, false},
		{read, gocql.ErrConnectionClosed, true},
		{read, &gocql.RequestErrUnavailable{}, false},
		{read, gocql.ErrTimeoutNoResponse, true},
		{stmt{idempotent: true, ctx: cancelled}, nil, true},
		{bare{read}, nil, false},
	} {
		next := p.Pick(c.qry)
		s := next()
		if s.Info() == nil {
			s = next()
		}
		s.Mark(c.err)
		require.Equal(t, c.behind, behind(), "after %v", c.err)
	}
}

// gocql sends a speculative copy to whatever the iterator gives next, and takes a nil
// for the query's answer (ErrNoConnections) ahead of the attempt still running. So a
// line gives its first node once more to a read, which may run on two nodes at once,
// and ends with its nodes for a write.
func TestExhaustedLineRepeatsFirstNodeOnlyForReads(t *testing.T) {
	h := &gocql.HostInfo{}
	p := Wrap(fixed{hosts: []*gocql.HostInfo{h}}, Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	next := p.Pick(read)
	require.Same(t, h, next().Info())
	again := next()
	require.NotNil(t, again)
	require.Same(t, h, again.Info())

	next = p.Pick(stmt{idempotent: true, st: new(gocql.Session).Query("INSERT INTO t (k) VALUES (1)")})
	require.Same(t, h, next().Info())
	require.Nil(t, next())
}

// v2 retries only idempotent requests, so writes and SERIAL reads are idempotent too:
// only a read that may be sent speculatively runs on two nodes at once.
func TestConcurrent(t *testing.T) {
	s := new(gocql.Session)
	for _, c := range []struct {
		r    gocql.ExecutableStatement
		want bool
	}{
		{stmt{idempotent: true, st: s.Query(" select v FROM t")}, true},
		{stmt{idempotent: false, st: s.Query("SELECT v FROM t")}, false},
		{stmt{idempotent: true, st: s.Query("SELECT v FROM t").Consistency(gocql.Serial)}, false},
		{stmt{idempotent: true, st: s.Query("SELECT v FROM t").Consistency(gocql.LocalSerial)}, false},
		{stmt{idempotent: true, st: s.Query("UPDATE t SET v = 1 WHERE k = 1")}, false},
		{stmt{idempotent: true, st: s.Batch(gocql.UnloggedBatch)}, false},
		{read, true},
		{stmt{}, false},
		{nil, false},
	} {
		require.Equal(t, c.want, concurrent(c.r), "%+v", c.r)
	}
}

// Wrapping twice wraps once, and a session no policy of Wrap serves, or one that knows
// a single node, sends no read speculatively.
func TestWrap(t *testing.T) {
	p := Wrap(gocql.RoundRobinHostPolicy(), Config{})
	require.Same(t, p, Wrap(p, Config{}))
	require.True(t, p.(gocql.ReadyPolicy).Ready())
	require.False(t, Speculate(new(gocql.Session)))
	s := new(gocql.Session)
	p.Init(s)
	p.AddHost(&gocql.HostInfo{})
	require.False(t, Speculate(s))
}
