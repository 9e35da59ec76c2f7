package hostpolicy

import (
	"context"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"
)

// oneHost is an inner policy that knows one node.
type oneHost struct {
	gocql.HostSelectionPolicy
	h *gocql.HostInfo
}

func (o oneHost) Pick(gocql.ExecutableStatement) gocql.NextHost {
	done := false
	return func() gocql.SelectedHost {
		if done {
			return nil
		}
		done = true
		return picked{o.h}
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
}

func (r stmt) IsIdempotent() bool         { return r.idempotent }
func (r stmt) Statement() gocql.Statement { return r.st }
func (stmt) Context() context.Context     { return context.Background() }

// read is an idempotent query whose statement gocql does not give: one that may run on
// two nodes at once.
var read = stmt{idempotent: true}

// gocql sends a speculative copy to whatever the iterator gives next, and takes a nil
// for the query's answer (ErrNoConnections) ahead of the attempt still running. So while
// an attempt runs, an exhausted line gives its first node once more; once every attempt
// was reported, it ends.
func TestExhaustedLineRepeatsFirstNodeWhileAnAttemptRuns(t *testing.T) {
	h := &gocql.HostInfo{}
	p := Wrap(oneHost{h: h}, Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})

	next := p.Pick(read)
	first := next()
	require.Same(t, h, first.Info())
	again := next() // the speculative copy, while the first attempt runs
	require.NotNil(t, again)
	require.Same(t, h, again.Info())
	require.Nil(t, next(), "once only")
	first.Mark(nil)
	again.Mark(nil)

	next = p.Pick(read)
	first = next()
	first.Mark(gocql.ErrTimeoutNoResponse)
	require.Nil(t, next(), "a retry after every attempt was reported finds the line ended")
}

// A request that never runs twice at once gets no copy: its line ends with its nodes.
func TestExhaustedLineEndsForWrites(t *testing.T) {
	h := &gocql.HostInfo{}
	p := Wrap(oneHost{h: h}, Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	next := p.Pick(stmt{idempotent: true, st: new(gocql.Session).Query("INSERT INTO t (k) VALUES (1)")})
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

// A node that lost a request goes behind the others for Backoff, doubling with each
// further loss; then one read tries it first, and an answer puts it back in line.
func TestLostRequestsSendANodeBehind(t *testing.T) {
	h := &gocql.HostInfo{}
	const backoff = 50 * time.Millisecond
	p := Wrap(oneHost{h: h}, Config{Slow: time.Hour, Backoff: backoff, MaxBackoff: 4 * backoff}).(*policy)
	require.Equal(t, use, p.judge(h, false), "a node never tried")

	next := p.Pick(read)
	next().Mark(gocql.ErrTimeoutNoResponse)
	require.Equal(t, avoid, p.judge(h, false))
	require.Equal(t, avoid, p.judge(h, true), "until the backoff ends")
	require.Equal(t, []time.Duration{backoff, 2 * backoff, 4 * backoff, 4 * backoff}, []time.Duration{p.backoff(1), p.backoff(2), p.backoff(3), p.backoff(4)})

	time.Sleep(backoff + 10*time.Millisecond)
	require.Equal(t, avoid, p.judge(h, false), "a write never tries it")
	next = p.Pick(read)
	probe := next()
	require.Equal(t, avoid, p.judge(h, true), "one read tries it at a time")
	probe.Mark(nil)
	require.Equal(t, use, p.judge(h, false), "an answer puts it back in line")

	// An answer that is an error is an answer.
	next = p.Pick(read)
	next().Mark(&gocql.RequestErrUnavailable{})
	require.Equal(t, use, p.judge(h, false))
}

// A node that leaves a request unanswered for longer than Slow, answering nothing
// meanwhile, goes behind the others while that lasts.
func TestSilentNodeGoesBehind(t *testing.T) {
	h := &gocql.HostInfo{}
	const slow = 20 * time.Millisecond
	p := Wrap(oneHost{h: h}, Config{Slow: slow, Backoff: time.Hour, MaxBackoff: time.Hour}).(*policy)
	next := p.Pick(read)
	running := next()
	require.Equal(t, use, p.judge(h, true))
	time.Sleep(2 * slow)
	require.Equal(t, avoid, p.judge(h, true))
	running.Mark(nil)
	require.Equal(t, use, p.judge(h, true), "it answered")
}

// Wrapping twice wraps once, and a session no policy of Wrap serves is not routed.
func TestWrap(t *testing.T) {
	p := Wrap(gocql.RoundRobinHostPolicy(), Config{})
	require.Same(t, p, Wrap(p, Config{}))
	require.False(t, Speculate(new(gocql.Session)))
	require.True(t, p.(gocql.ReadyPolicy).Ready())
}
