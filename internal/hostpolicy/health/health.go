// Package health keeps what a host selection policy knows of each Cassandra node's
// health, keyed by host ID, and orders a request's nodes by it. It is the part of
// internal/hostpolicy (github.com/gocql/gocql) and shardqgocqlv2/internal/hostpolicy
// (the Apache Cassandra GoCQL driver v2) that does not depend on the driver, so it
// imports none: each of those wrappers translates its driver's hosts, requests and
// errors into the terms of this package. See internal/hostpolicy for why a frozen node
// needs routing around.
//
// A node goes behind the others while it has had a request outstanding for longer than
// Config.Slow without answering anything since, and after each request it never answered
// (timed out, lost with its connection, or abandoned for a speculative copy) for a while
// that doubles each time, from Config.Backoff up to Config.MaxBackoff. Then one request
// that may run on two nodes at once (a read the driver may send speculatively) tries it
// first; any answer puts it back in line. A node that is merely busy keeps answering, so
// it keeps its place.
package health

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config says when a node counts as not answering.
type Config struct {
	// Slow is how long a node may leave a request unanswered, answering nothing else
	// meanwhile, before it goes behind the others. Keep it below the delay of speculative
	// reads, so that a read abandoned for its speculative copy counts against its node.
	Slow time.Duration
	// Backoff is how long a node stays behind the others after the first request it
	// never answered; each further one doubles it, up to MaxBackoff.
	Backoff time.Duration
	// MaxBackoff is the longest a node stays behind the others after a request it never
	// answered.
	MaxBackoff time.Duration
}

// forget is how long an attempt may go unreported before it is dropped: the drivers do
// not report attempts they skipped (the host went down, or had no connection), and a
// real one ends within the driver's timeout.
const forget = 30 * time.Second

// Tracker is what one policy knows of the nodes of its session. It is safe for
// concurrent use.
type Tracker struct {
	cfg   Config
	now   func() time.Time // time.Now, which tests replace to move time on
	mu    sync.Mutex
	hosts map[string]*state
	known map[string]bool // the nodes the driver gave the policy
	// several says known holds two nodes or more, read without the lock by every read
	// shardq sends.
	several atomic.Bool
}

// New returns a Tracker that knows no node yet.
func New(cfg Config) *Tracker {
	return &Tracker{cfg: cfg, now: time.Now, hosts: map[string]*state{}, known: map[string]bool{}}
}

// state is what the tracker knows of one node.
type state struct {
	inflight   map[*Attempt]struct{}
	answered   time.Time // when it last answered a request
	strikes    int       // requests it never answered since its last answer
	avoidUntil time.Time // when it may be tried first again
	probing    bool      // a request is trying it first now
}

// Request is one query's execution: its attempts on one node after another, and
// speculative copies of it running at once.
type Request struct {
	t          *Tracker
	concurrent bool                   // it may run on two nodes at once
	ctx        func() context.Context // the query's context, when the driver gives it
	answered   bool                   // an attempt got an answer: the others still running are abandoned
	inflight   int                    // attempts sent and not reported yet
}

// Request starts tracking the execution of one query. concurrent says the driver may
// run it on two nodes at once (a read it may send speculatively); a request that may
// not is never made to try a node that stopped answering, and an attempt of it that is
// still unreported when the driver asks for another node was skipped. ctx gives the
// query's context, nil when the driver does not give it.
func (t *Tracker) Request(concurrent bool, ctx func() context.Context) *Request {
	return &Request{t: t, concurrent: concurrent, ctx: ctx}
}

// Attempt is one request sent to a node, until the driver reports its outcome.
type Attempt struct {
	key    string
	at     time.Time
	probe  bool
	marked bool
	q      *Request
}

// verdict is where a node goes in a request's line.
type verdict int

const (
	use   verdict = iota // in its place
	probe                // in its place, as the one request that tries it
	avoid                // behind the nodes that answer
)

// Add records nodes the driver gave the policy, by host ID.
func (t *Tracker) Add(ids ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.known[id] = true
	}
	t.several.Store(len(t.known) > 1)
}

// Remove forgets a node the driver removed, with all the tracker knew of it.
func (t *Tracker) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.hosts, id)
	delete(t.known, id)
	t.several.Store(len(t.known) > 1)
}

// Several reports whether the driver gave the policy two nodes or more, so that a
// speculative copy of a read has a second node to go to. It takes no lock.
func (t *Tracker) Several() bool { return t.several.Load() }

// pending reports whether an attempt of r is under way.
func (r *Request) pending() bool {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.inflight > 0
}

// judge places a node in the line of r; known is false when the driver did not say
// which node it is.
func (r *Request) judge(id string, known bool) verdict {
	if !known {
		return use
	}
	t := r.t
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.hosts[id]
	if st == nil {
		return use
	}
	for a := range st.inflight {
		switch age := now.Sub(a.at); {
		case age > forget:
			delete(st.inflight, a)
		case age > t.cfg.Slow && st.answered.Before(a.at):
			return avoid // silent ever since this request went out
		}
	}
	switch {
	case st.strikes == 0:
		return use
	case now.Before(st.avoidUntil) || st.probing || !r.concurrent:
		return avoid
	}
	st.probing = true
	return probe
}

// track records an attempt of r about to be sent to a node; known is false when the
// driver did not say which node it is, and then the attempt counts for nothing.
func (r *Request) track(id string, known, probe bool) *Attempt {
	t := r.t
	a := &Attempt{at: t.now(), probe: probe, q: r}
	if !known {
		a.marked = true
		return a
	}
	a.key = id
	t.mu.Lock()
	defer t.mu.Unlock()
	r.inflight++
	st := t.hosts[a.key]
	if st == nil {
		st = &state{inflight: map[*Attempt]struct{}{}}
		t.hosts[a.key] = st
	}
	st.inflight[a] = struct{}{}
	return a
}

// skipped forgets an attempt the driver did not make.
func (t *Tracker) skipped(a *Attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settle(a)
}

// settle ends attempt a, with t.mu held, and returns what is known of its node: nil
// when a ended before, or its node was removed.
func (t *Tracker) settle(a *Attempt) *state {
	if a.marked {
		return nil
	}
	a.marked = true
	a.q.inflight--
	st := t.hosts[a.key]
	if st == nil {
		return nil
	}
	delete(st.inflight, a)
	if a.probe {
		st.probing = false
	}
	return st
}

// Mark records the outcome of the attempt, which the driver reported as err: nil for an
// answer, or for an attempt cancelled by its caller or because a speculative copy was
// answered first, which the drivers do not tell apart. lost says err is one of the
// driver's own errors for a request its node never answered (a timeout, a connection
// closed while waiting), which only the driver's wrapper can tell; a network error
// (net.Error) means so too whatever the driver. Any other error is an answer. Only the
// first report counts.
func (a *Attempt) Mark(err error, lost bool) {
	var ne net.Error
	a.q.t.mark(a, err, lost || errors.As(err, &ne))
}

func (t *Tracker) mark(a *Attempt, err error, lost bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.settle(a)
	if st == nil {
		return
	}
	// The drivers report an attempt cancelled as they report an answer, with a nil error.
	cancelled := err == nil && (a.q.answered || (a.q.ctx != nil && a.q.ctx().Err() != nil))
	switch {
	case !lost && !cancelled:
		a.q.answered = true
		st.answered, st.strikes, st.avoidUntil = now, 0, time.Time{}
	case st.answered.Before(a.at) && (lost || now.Sub(a.at) > t.cfg.Slow):
		st.strikes++
		st.avoidUntil = now.Add(t.backoff(st.strikes))
	}
}

// backoff is how long a node stays behind the others after its strikes-th request in a
// row that it never answered.
func (t *Tracker) backoff(strikes int) time.Duration {
	d := t.cfg.Backoff
	for i := 1; i < strikes && d < t.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, t.cfg.MaxBackoff)
}
