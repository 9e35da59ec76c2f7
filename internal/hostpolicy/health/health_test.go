package health

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// host is a node of a fake driver.
type host struct{ id string }

func (h *host) HostID() string { return h.id }

// selected is the fake driver's SelectedHost.
type selected interface {
	Info() *host
	Mark(error)
}

// chosen is a node the fake driver's inner policy chose; it records its reports.
type chosen struct {
	h     *host
	marks *[]error
}

func (c chosen) Info() *host { return c.h }

func (c chosen) Mark(err error) {
	if c.marks != nil {
		*c.marks = append(*c.marks, err)
	}
}

// errNoAnswer is the fake driver's error for a request its node never answered.
var errNoAnswer = errors.New("no answer")

func lost(err error) bool { return errors.Is(err, errNoAnswer) }

func hand(h selected, a *Attempt) selected { return Track(h, a, lost) }

// clock is a tracker's time, which only the test moves on.
type clock struct{ now time.Time }

func (c *clock) add(d time.Duration) { c.now = c.now.Add(d) }

func newTracker(cfg Config) (*Tracker, *clock) {
	c := &clock{now: time.Unix(1_000_000, 0)}
	t := New(cfg)
	t.now = func() time.Time { return c.now }
	return t, c
}

// line returns the nodes of a request in the order an inner policy gives them.
func line(hosts ...*host) func() selected {
	i := 0
	return func() selected {
		if i == len(hosts) {
			return nil
		}
		i++
		return chosen{h: hosts[i-1]}
	}
}

// order is where the nodes go in the line of a request, with every attempt reported
// skipped; concurrent says whether the request may run on two nodes at once.
func order(tr *Tracker, concurrent bool, hosts ...*host) []string {
	next := Line(tr.Request(concurrent, nil), line(hosts...), hand)
	var ids []string
	for h := next(); h != nil && len(ids) < len(hosts); h = next() {
		ids = append(ids, h.Info().id)
		tr.skipped(h.(*Tracked[*host]).a)
	}
	return ids
}

// try sends one request to the first node of its line and reports err as its outcome.
func try(tr *Tracker, concurrent bool, err error, hosts ...*host) string {
	h := Line(tr.Request(concurrent, nil), line(hosts...), hand)()
	h.Mark(err)
	return h.Info().id
}

// place is where h goes in a request's line, as judge says.
func (tr *Tracker) place(h *host, concurrent bool) verdict {
	return tr.Request(concurrent, nil).judge(h.id, true)
}

func TestLineKeepsTheInnerOrder(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	a, b, c := &host{"a"}, &host{"b"}, &host{"c"}
	require.Equal(t, []string{"a", "b", "c"}, order(tr, true, a, b, c))
	require.Equal(t, []string{"a", "b", "c"}, order(tr, false, a, b, c))
}

// Nodes that stopped answering go behind the others, in the inner policy's order.
func TestAvoidedNodesGoBehindInTheirOrder(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Second, Backoff: time.Minute, MaxBackoff: time.Minute})
	a, b, c := &host{"a"}, &host{"b"}, &host{"c"}
	require.Equal(t, "a", try(tr, true, errNoAnswer, a))
	require.Equal(t, "b", try(tr, true, errNoAnswer, b))
	require.Equal(t, []string{"c", "a", "b"}, order(tr, true, a, b, c))
	require.Equal(t, []string{"c", "a", "b"}, order(tr, false, a, b, c))
}

// A node that lost a request goes behind the others for Backoff, doubling with each
// further loss; then one read tries it first, and an answer puts it back in line.
func TestLostRequestsSendANodeBehind(t *testing.T) {
	const backoff = 50 * time.Millisecond
	tr, clk := newTracker(Config{Slow: time.Hour, Backoff: backoff, MaxBackoff: 4 * backoff})
	h, other := &host{"h"}, &host{"other"}
	require.Equal(t, use, tr.place(h, false), "a node never tried")

	try(tr, true, errNoAnswer, h)
	require.Equal(t, avoid, tr.place(h, false))
	require.Equal(t, avoid, tr.place(h, true), "until the backoff ends")

	clk.add(backoff + time.Millisecond)
	require.Equal(t, avoid, tr.place(h, false), "a request that never runs twice never tries it")
	probe := Line(tr.Request(true, nil), line(h, other), hand)()
	require.Same(t, h, probe.Info(), "a read tries it first")
	require.Equal(t, avoid, tr.place(h, true), "one read tries it at a time")
	probe.Mark(nil)
	require.Equal(t, use, tr.place(h, false), "an answer puts it back in line")

	// An answer that is an error is an answer.
	try(tr, true, errors.New("unavailable"), h)
	require.Equal(t, use, tr.place(h, false))
}

func TestBackoffDoublesUpToMaxBackoff(t *testing.T) {
	const backoff = time.Second
	tr, clk := newTracker(Config{Slow: time.Hour, Backoff: backoff, MaxBackoff: 4 * backoff})
	require.Equal(t, []time.Duration{backoff, 2 * backoff, 4 * backoff, 4 * backoff},
		[]time.Duration{tr.backoff(1), tr.backoff(2), tr.backoff(3), tr.backoff(4)})
	uneven, _ := newTracker(Config{Backoff: 3 * time.Second, MaxBackoff: 4 * time.Second})
	require.Equal(t, 4*time.Second, uneven.backoff(2), "doubling stops at MaxBackoff")

	// Each probe the node leaves unanswered is a further strike.
	h, other := &host{"h"}, &host{"other"}
	try(tr, true, errNoAnswer, h)
	for _, d := range []time.Duration{backoff, 2 * backoff, 4 * backoff, 4 * backoff} {
		clk.add(d - time.Millisecond)
		require.Equal(t, "other", try(tr, true, nil, h, other), "within %v", d)
		clk.add(time.Millisecond)
		require.Equal(t, "h", try(tr, true, errNoAnswer, h, other), "after %v", d)
	}
}

// A node that leaves a request unanswered for longer than Slow, answering nothing
// meanwhile, goes behind the others while that lasts.
func TestSilentNodeGoesBehind(t *testing.T) {
	const slow = 20 * time.Millisecond
	tr, clk := newTracker(Config{Slow: slow, Backoff: time.Hour, MaxBackoff: time.Hour})
	h := &host{"h"}
	running := Line(tr.Request(true, nil), line(h), hand)()
	require.Equal(t, use, tr.place(h, true))
	clk.add(2 * slow)
	require.Equal(t, avoid, tr.place(h, true))
	running.Mark(nil)
	require.Equal(t, use, tr.place(h, true), "it answered")
}

// A node that answered another request since is not silent.
func TestAnswerMeanwhileKeepsANodeInLine(t *testing.T) {
	const slow = 20 * time.Millisecond
	tr, clk := newTracker(Config{Slow: slow, Backoff: time.Hour, MaxBackoff: time.Hour})
	h := &host{"h"}
	running := Line(tr.Request(true, nil), line(h), hand)()
	clk.add(slow / 2)
	try(tr, true, nil, h)
	clk.add(2 * slow)
	require.Equal(t, use, tr.place(h, true))
	running.Mark(errNoAnswer)
	require.Equal(t, use, tr.place(h, true), "a loss before its last answer is no strike")
}

// The drivers report nothing of an attempt they skipped (the node went down, or had no
// connection); the tracker forgets it.
func TestUnreportedAttemptsAreForgotten(t *testing.T) {
	const slow = time.Second
	tr, clk := newTracker(Config{Slow: slow, Backoff: time.Hour, MaxBackoff: time.Hour})
	a, b := &host{"a"}, &host{"b"}

	// A request that never runs twice at once asks for another node only once the
	// attempt before was reported or skipped.
	next := Line(tr.Request(false, nil), line(a, b), hand)
	require.Same(t, a, next().Info())
	require.Same(t, b, next().Info())
	clk.add(2 * slow)
	require.Equal(t, use, tr.place(a, true), "the attempt on a was skipped")
	require.Equal(t, avoid, tr.place(b, true), "the attempt on b is running")

	// Any other attempt is dropped once it could not be running any more.
	clk.add(forget)
	require.Equal(t, use, tr.place(b, true))
}

// The drivers report an attempt cancelled, by its caller or because a speculative copy
// was answered first, as an answer: with a nil error.
func TestCancelledAttemptsAreNoAnswer(t *testing.T) {
	const slow = time.Second
	tr, clk := newTracker(Config{Slow: slow, Backoff: time.Hour, MaxBackoff: time.Hour})
	a, b := &host{"a"}, &host{"b"}

	// Cancelled by its caller, within Slow: nothing said of the node.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := Line(tr.Request(true, func() context.Context { return ctx }), line(a), hand)()
	try(tr, true, errNoAnswer, a)
	h.Mark(nil)
	require.Equal(t, avoid, tr.place(a, true), "no answer clears the strike")

	// Abandoned for a speculative copy answered first, after Slow: a strike.
	next := Line(tr.Request(true, nil), line(b, a), hand)
	first := next()
	require.Same(t, b, first.Info())
	clk.add(2 * slow)
	second := next()
	require.Same(t, a, second.Info())
	second.Mark(nil)
	first.Mark(nil)
	require.Equal(t, avoid, tr.place(b, true))
	require.Equal(t, 1, tr.hosts["b"].strikes)
}

// Whatever the driver, a network error means the node never answered.
func TestNetworkErrorsAreLost(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	h := &host{"h"}
	try(tr, true, &net.OpError{Op: "read", Err: errors.New("reset")}, h)
	require.Equal(t, avoid, tr.place(h, true))
}

// Tracked reports to the inner policy's node as well, and only its first report counts.
func TestTrackedReportsToBoth(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	h := &host{"h"}
	var marks []error
	next := Line(tr.Request(true, nil), func() selected { return chosen{h: h, marks: &marks} }, hand)
	s := next()
	s.Mark(nil)
	s.Mark(errNoAnswer)
	require.Equal(t, []error{nil, errNoAnswer}, marks)
	require.Equal(t, use, tr.place(h, true))
}

// A node the driver does not name is handed on, and counts for nothing.
func TestUnnamedNodeCountsForNothing(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	next := Line(tr.Request(true, nil), line((*host)(nil)), hand)
	s := next()
	require.NotNil(t, s)
	require.Nil(t, s.Info())
	require.Nil(t, next(), "nothing runs")
	s.Mark(errNoAnswer)
	require.Empty(t, tr.hosts)
}

// The drivers send a speculative copy to whatever the line gives next, and take a nil
// for the query's answer (ErrNoConnections) ahead of the attempt still running. So while
// an attempt runs, an exhausted line gives its first node once more; once every attempt
// was reported, it ends.
func TestExhaustedLineRepeatsFirstNodeWhileAnAttemptRuns(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	h := &host{"h"}

	next := Line(tr.Request(true, nil), line(h), hand)
	first := next()
	require.Same(t, h, first.Info())
	again := next() // the speculative copy, while the first attempt runs
	require.NotNil(t, again)
	require.Same(t, h, again.Info())
	require.Nil(t, next(), "once only")
	first.Mark(nil)
	again.Mark(nil)

	next = Line(tr.Request(true, nil), line(h), hand)
	next().Mark(errNoAnswer)
	require.Nil(t, next(), "a retry after every attempt was reported finds the line ended")
}

// A request that never runs twice at once gets no copy: its line ends with its nodes.
func TestExhaustedLineEndsForRequestsThatNeverRunTwice(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})
	h := &host{"h"}
	next := Line(tr.Request(false, nil), line(h), hand)
	require.Same(t, h, next().Info())
	require.Nil(t, next())
}

func TestKnownNodes(t *testing.T) {
	tr, _ := newTracker(Config{Slow: time.Hour, Backoff: time.Hour, MaxBackoff: time.Hour})
	require.False(t, tr.Several())
	tr.Add("a")
	tr.Add("a")
	require.False(t, tr.Several(), "one node, told twice")
	tr.Add("b", "c")
	require.True(t, tr.Several())
	tr.Remove("b")
	require.True(t, tr.Several())
	tr.Remove("c")
	require.False(t, tr.Several())

	// Removing a node forgets its health.
	a := &host{"a"}
	try(tr, true, errNoAnswer, a)
	require.Equal(t, avoid, tr.place(a, true))
	tr.Remove("a")
	require.Equal(t, use, tr.place(a, true))
}

// session is a fake driver's session.
type session struct{ name string }

// inner is a fake driver's policy: it records what it is told.
type inner struct {
	hosts []string
	inits int
}

func (p *inner) AddHost(h *host)    { p.hosts = append(p.hosts, "+"+h.id) }
func (p *inner) RemoveHost(h *host) { p.hosts = append(p.hosts, "-"+h.id) }
func (p *inner) Init(*session)      { p.inits++ }

// bulk takes nodes in one call, and says when it is ready.
type bulk struct {
	inner
	ready bool
}

func (p *bulk) AddHosts(hosts []*host) {
	for _, h := range hosts {
		p.hosts = append(p.hosts, "++"+h.id)
	}
}

func (p *bulk) Ready() bool { return p.ready }

func TestBasePassesNoticesOn(t *testing.T) {
	in := &inner{}
	b := NewBase(in, Config{})
	b.AddHosts([]*host{{"a"}, {"b"}})
	require.True(t, b.Several())
	b.RemoveHost(&host{"a"})
	require.False(t, b.Several())
	b.AddHost(&host{"c"})
	require.True(t, b.Several())
	require.Equal(t, []string{"+a", "+b", "-a", "+c"}, in.hosts)
	require.True(t, b.Ready(), "a policy that does not say is ready")

	bu := &bulk{}
	b = NewBase(bu, Config{})
	b.AddHosts([]*host{{"a"}, {"b"}})
	require.Equal(t, []string{"++a", "++b"}, bu.hosts)
	require.False(t, b.Ready())
	bu.ready = true
	require.True(t, b.Ready())
}

func TestSeveralTellsTheSessionsABaseServes(t *testing.T) {
	in := &inner{}
	b := NewBase(in, Config{})
	s := &session{"s"}
	require.False(t, Several(s), "no Base serves it")
	b.Init(s)
	require.Equal(t, 1, in.inits)
	require.False(t, Several(s), "one node")
	b.AddHosts([]*host{{"a"}, {"b"}})
	require.True(t, Several(s))

	// A second Init of the same session keeps the first Base.
	NewBase(&inner{}, Config{}).Init(s)
	require.True(t, Several(s))
	runtime.KeepAlive(s)
}
