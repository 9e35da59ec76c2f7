// Package hostpolicy routes requests of the Apache Cassandra GoCQL driver v2 away from
// nodes that stopped answering. It is internal/hostpolicy, which does the same for
// github.com/gocql/gocql, ported to v2's HostSelectionPolicy; see that package for why a
// frozen node needs routing around.
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
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
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

// forget is how long an attempt may go unreported before it is dropped: gocql does not
// report attempts it skipped (the host went down, or had no connection), and a real one
// ends within the driver's timeout.
const forget = 30 * time.Second

// Wrap returns a policy that orders nodes as inner does, behind those that answer
// promptly. Like gocql's policies, it serves one session. Wrapping a policy Wrap returned
// gives it back unchanged.
func Wrap(inner gocql.HostSelectionPolicy, cfg Config) gocql.HostSelectionPolicy {
	if p, ok := inner.(*policy); ok {
		return p
	}
	return &policy{HostSelectionPolicy: inner, cfg: cfg, hosts: map[string]*health{}, known: map[string]bool{}}
}

type policy struct {
	gocql.HostSelectionPolicy
	cfg   Config
	mu    sync.Mutex
	hosts map[string]*health
	known map[string]bool // the nodes gocql gave the policy
	// several says known holds two nodes or more, read without the lock by every read
	// shardq sends.
	several atomic.Bool
}

// health is what the policy knows of one node.
type health struct {
	inflight   map[*attempt]struct{}
	answered   time.Time // when it last answered a request
	strikes    int       // requests it never answered since its last answer
	avoidUntil time.Time // when it may be tried first again
	probing    bool      // a request is trying it first now
}

// attempt is one request sent to a node, until gocql reports its outcome.
type attempt struct {
	key    string
	at     time.Time
	probe  bool
	marked bool
	q      *request
}

// request is one query's execution: its attempts on one node after another, and
// speculative copies of it running at once.
type request struct {
	ctx      func() context.Context // the request's context, when gocql gives it
	answered bool                   // an attempt got an answer: the others still running are abandoned
	inflight int                    // attempts sent and not reported yet
}

// verdict is where a node goes in a request's line.
type verdict int

const (
	use   verdict = iota // in its place
	probe                // in its place, as the one request that tries it
	avoid                // behind the nodes that answer
)

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

func (p *policy) Pick(qry gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(qry)
	idempotent := concurrent(qry)
	req := &request{}
	if c, ok := qry.(interface{ Context() context.Context }); ok {
		req.ctx = c.Context
	}
	var held []gocql.SelectedHost // avoided nodes, in the inner policy's order
	var last *attempt
	var first gocql.SelectedHost // the node the request went to first
	exhausted, again := false, false
	return func() gocql.SelectedHost {
		if last != nil && !idempotent {
			// gocql asks again after reporting an attempt, or after skipping the node
			// without a word; a request that never runs twice at once has an attempt still
			// unreported only when it was skipped.
			p.skipped(last)
		}
		for !exhausted {
			h := next()
			if h == nil {
				exhausted = true
				break
			}
			switch v := p.judge(h.Info(), idempotent); v {
			case avoid:
				held = append(held, h)
			default:
				return p.hand(h, req, v == probe, &first, &last)
			}
		}
		if len(held) > 0 {
			h := held[0]
			held = held[1:]
			return p.hand(h, req, false, &first, &last)
		}
		// gocql sends a speculative copy to the next node, and takes the copy's
		// ErrNoConnections, when there is none, for the query's answer, ahead of the
		// attempt still running: on one node, every read slower than the speculative delay
		// would fail. Such a copy goes to the first node once more.
		if idempotent && !again && first != nil && p.pending(req) {
			again = true
			last = p.track(first.Info(), req, false)
			return &selected{SelectedHost: first, p: p, a: last}
		}
		return nil
	}
}

// hand tracks h as the next attempt of req.
func (p *policy) hand(h gocql.SelectedHost, req *request, probe bool, first *gocql.SelectedHost, last **attempt) gocql.SelectedHost {
	if *first == nil {
		*first = h
	}
	*last = p.track(h.Info(), req, probe)
	return &selected{SelectedHost: h, p: p, a: *last}
}

// pending reports whether an attempt of req is under way.
func (p *policy) pending(req *request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return req.inflight > 0
}

func key(h *gocql.HostInfo) string { return h.HostID() }

// judge places h in the line of a request.
func (p *policy) judge(h *gocql.HostInfo, idempotent bool) verdict {
	if h == nil {
		return use
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.hosts[key(h)]
	if st == nil {
		return use
	}
	for a := range st.inflight {
		switch age := now.Sub(a.at); {
		case age > forget:
			delete(st.inflight, a)
		case age > p.cfg.Slow && st.answered.Before(a.at):
			return avoid // silent ever since this request went out
		}
	}
	switch {
	case st.strikes == 0:
		return use
	case now.Before(st.avoidUntil) || st.probing || !idempotent:
		return avoid
	}
	st.probing = true
	return probe
}

// track records an attempt about to be sent to h.
func (p *policy) track(h *gocql.HostInfo, req *request, probe bool) *attempt {
	a := &attempt{at: time.Now(), probe: probe, q: req}
	if h == nil {
		a.marked = true
		return a
	}
	a.key = key(h)
	p.mu.Lock()
	defer p.mu.Unlock()
	req.inflight++
	st := p.hosts[a.key]
	if st == nil {
		st = &health{inflight: map[*attempt]struct{}{}}
		p.hosts[a.key] = st
	}
	st.inflight[a] = struct{}{}
	return a
}

// skipped forgets an attempt gocql did not make.
func (p *policy) skipped(a *attempt) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.marked {
		return
	}
	a.marked = true
	a.q.inflight--
	if st := p.hosts[a.key]; st != nil {
		delete(st.inflight, a)
		if a.probe {
			st.probing = false
		}
	}
}

// mark records the outcome of attempt a.
func (p *policy) mark(a *attempt, err error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.marked {
		return
	}
	a.marked = true
	a.q.inflight--
	st := p.hosts[a.key]
	if st == nil {
		return
	}
	delete(st.inflight, a)
	if a.probe {
		st.probing = false
	}
	// gocql reports an attempt cancelled (by its caller, or because a speculative copy
	// was answered first) as it reports an answer, with a nil error.
	cancelled := err == nil && (a.q.answered || (a.q.ctx != nil && a.q.ctx().Err() != nil))
	switch {
	case !lost(err) && !cancelled:
		a.q.answered = true
		st.answered, st.strikes, st.avoidUntil = now, 0, time.Time{}
	case st.answered.Before(a.at) && (lost(err) || now.Sub(a.at) > p.cfg.Slow):
		st.strikes++
		st.avoidUntil = now.Add(p.backoff(st.strikes))
	}
}

func (p *policy) backoff(strikes int) time.Duration {
	d := p.cfg.Backoff
	for i := 1; i < strikes && d < p.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.cfg.MaxBackoff)
}

// lost reports whether err says a request got no answer from its node, as opposed to an
// answer that is an error.
func lost(err error) bool {
	var ne net.Error
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed) || errors.As(err, &ne)
}

// routed holds the sessions a policy of Wrap serves, until they are collected.
var routed sync.Map // weak.Pointer[gocql.Session] -> *policy

// Init records that p serves s, for Speculate.
func (p *policy) Init(s *gocql.Session) {
	w := weak.Make(s)
	if _, loaded := routed.LoadOrStore(w, p); !loaded {
		runtime.AddCleanup(s, func(w weak.Pointer[gocql.Session]) { routed.Delete(w) }, w)
	}
	p.HostSelectionPolicy.Init(s)
}

// Speculate reports whether s may send reads speculatively: a policy of Wrap serves it
// (gocql alone fails a speculative read whose copy finds no node left) and knows a second
// node to send a copy to.
func Speculate(s *gocql.Session) bool {
	v, ok := routed.Load(weak.Make(s))
	if !ok {
		return false
	}
	return v.(*policy).several.Load()
}

func (p *policy) AddHost(h *gocql.HostInfo) {
	p.mu.Lock()
	p.known[key(h)] = true
	p.several.Store(len(p.known) > 1)
	p.mu.Unlock()
	p.HostSelectionPolicy.AddHost(h)
}

func (p *policy) RemoveHost(h *gocql.HostInfo) {
	p.mu.Lock()
	delete(p.hosts, key(h))
	delete(p.known, key(h))
	p.several.Store(len(p.known) > 1)
	p.mu.Unlock()
	p.HostSelectionPolicy.RemoveHost(h)
}

// AddHosts and Ready pass on what gocql looks for in the policy it is given. (The token
// aware policy's notice of a schema refresh is an unexported method, which no wrapper
// can pass on: gocql then tells the wrapper of each keyspace that changed instead, and
// KeyspaceChanged passes that on.)
func (p *policy) AddHosts(hosts []*gocql.HostInfo) {
	p.mu.Lock()
	for _, h := range hosts {
		p.known[key(h)] = true
	}
	p.several.Store(len(p.known) > 1)
	p.mu.Unlock()
	if bulk, ok := p.HostSelectionPolicy.(interface{ AddHosts([]*gocql.HostInfo) }); ok {
		bulk.AddHosts(hosts)
		return
	}
	for _, h := range hosts {
		p.HostSelectionPolicy.AddHost(h)
	}
}

func (p *policy) Ready() bool {
	if r, ok := p.HostSelectionPolicy.(gocql.ReadyPolicy); ok {
		return r.Ready()
	}
	return true
}

// selected reports the outcome of its attempt to the policy as well as to the inner one.
type selected struct {
	gocql.SelectedHost
	p *policy
	a *attempt
}

func (s *selected) Mark(err error) {
	s.SelectedHost.Mark(err)
	s.p.mark(s.a, err)
}
