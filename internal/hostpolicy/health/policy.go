package health

import (
	"runtime"
	"sync"
	"weak"
)

// The host selection policies of the two drivers differ in their package, not in their
// shape, so what a wrapper of either does that needs nothing more of its driver than
// that shape is here, generic over the driver's types.

// Node is a node as a driver names it to its policy: *HostInfo. The nil Node is none.
type Node interface {
	comparable
	HostID() string
}

// SelectedHost is a node a driver's policy chose for an attempt, as the driver's
// SelectedHost is.
type SelectedHost[N Node] interface {
	Info() N
	Mark(error)
}

// Selection is the driver's SelectedHost interface itself, whose nil value ends a line
// of nodes.
type Selection[N Node] interface {
	comparable
	SelectedHost[N]
}

// Line returns the line of nodes that req tries, one by one and for speculative copies,
// as the driver's NextHost: the nodes next gives (the line of the policy a wrapper
// wraps), in its order, except that those the tracker avoids go behind the others. hand
// ties each node to the attempt about to be made on it, for the driver's report of the
// attempt to reach Attempt.Mark; Track does that.
func Line[N Node, S Selection[N]](req *Request, next func() S, hand func(S, *Attempt) S) func() S {
	var none S
	var held []S // avoided nodes, in the inner policy's order
	var last *Attempt
	first := none // the node the request went to first
	exhausted, again := false, false
	give := func(h S, probe bool) S {
		if first == none {
			first = h
		}
		id, known := node[N](h)
		last = req.track(id, known, probe)
		return hand(h, last)
	}
	return func() S {
		if last != nil && !req.concurrent {
			// The drivers ask again after reporting an attempt, or after skipping the node
			// without a word; a request that never runs twice at once has an attempt still
			// unreported only when it was skipped.
			req.t.skipped(last)
		}
		for !exhausted {
			h := next()
			if h == none {
				exhausted = true
				break
			}
			switch v := req.judge(node[N](h)); v {
			case avoid:
				held = append(held, h)
			default:
				return give(h, v == probe)
			}
		}
		if len(held) > 0 {
			h := held[0]
			held = held[1:]
			return give(h, false)
		}
		// The drivers send a speculative copy to the next node, and take the copy's
		// ErrNoConnections, when there is none, for the query's answer, ahead of the
		// attempt still running: on one node, every read slower than the speculative delay
		// would fail. Such a copy goes to the first node once more.
		if req.concurrent && !again && first != none && req.pending() {
			again = true
			return give(first, false)
		}
		return none
	}
}

// node is the host ID of the node h is; known is false when the driver did not say which
// node it is.
func node[N Node](h SelectedHost[N]) (id string, known bool) {
	var none N
	if n := h.Info(); n != none {
		return n.HostID(), true
	}
	return "", false
}

// Tracked is a node handed to the driver for an attempt: it reports the attempt's
// outcome to the tracker as well as to the policy that chose the node.
type Tracked[N Node] struct {
	SelectedHost[N]
	a    *Attempt
	lost func(error) bool
}

// Track ties h to the attempt a about to be made on it. lost tells the driver's own
// errors for a request its node never answered, for Attempt.Mark.
func Track[N Node](h SelectedHost[N], a *Attempt, lost func(error) bool) *Tracked[N] {
	return &Tracked[N]{SelectedHost: h, a: a, lost: lost}
}

func (t *Tracked[N]) Mark(err error) {
	t.SelectedHost.Mark(err)
	t.a.Mark(err, t.lost(err))
}

// Inner is what Base needs of the driver's policy a wrapper wraps, N being the driver's
// *HostInfo and S its Session.
type Inner[N Node, S any] interface {
	AddHost(N)
	RemoveHost(N)
	Init(*S)
}

// Base is the part of a wrapper of a driver's policy that passes the driver's notices
// on to the policy it wraps: the nodes it adds and removes, its session, and whether the
// policy is ready. A wrapper embeds Base one level above the policy it wraps, so that the
// methods of Base take the place of the inner policy's, and the inner policy's other
// methods pass through.
type Base[N Node, S any] struct {
	*Tracker
	inner Inner[N, S]
}

// NewBase returns a Base for inner, with a Tracker of its own.
func NewBase[N Node, S any](inner Inner[N, S], cfg Config) Base[N, S] {
	return Base[N, S]{Tracker: New(cfg), inner: inner}
}

func (b Base[N, S]) AddHost(h N) {
	b.Add(h.HostID())
	b.inner.AddHost(h)
}

func (b Base[N, S]) RemoveHost(h N) {
	b.Remove(h.HostID())
	b.inner.RemoveHost(h)
}

// AddHosts and Ready pass on what the drivers look for in the policy they are given.
func (b Base[N, S]) AddHosts(hosts []N) {
	ids := make([]string, len(hosts))
	for i, h := range hosts {
		ids[i] = h.HostID()
	}
	b.Add(ids...)
	if bulk, ok := b.inner.(interface{ AddHosts([]N) }); ok {
		bulk.AddHosts(hosts)
		return
	}
	for _, h := range hosts {
		b.inner.AddHost(h)
	}
}

func (b Base[N, S]) Ready() bool {
	if r, ok := b.inner.(interface{ Ready() bool }); ok {
		return r.Ready()
	}
	return true
}

// Init records that the policy serves s, for Several.
func (b Base[N, S]) Init(s *S) {
	w := weak.Make(s)
	if _, loaded := sessions.LoadOrStore(w, b.Tracker); !loaded {
		runtime.AddCleanup(s, func(w weak.Pointer[S]) { sessions.Delete(w) }, w)
	}
	b.inner.Init(s)
}

// sessions holds the sessions a Base serves, until they are collected. A session of
// one driver is never taken for one of the other: the keys' types differ.
var sessions sync.Map // weak.Pointer[S] -> *Tracker

// Several reports whether a Base serves s and knows two nodes or more (Tracker.Several).
func Several[S any](s *S) bool {
	v, ok := sessions.Load(weak.Make(s))
	return ok && v.(*Tracker).Several()
}
