// Package memstore is an in-memory store.Store with the semantics of the Cassandra
// implementation (internal/store) where shardq's correctness depends on them, for the
// deterministic simulator: every statement the Cassandra implementation sends
// is mirrored here, on cells with write timestamps and TTLs, row markers, tombstones
// purged after gc_grace_seconds, the tombstone failure threshold, paged range reads, and
// conditional writes stamped by ballots of the servers' clock. Each request the Cassandra
// implementation would send is first put to a Gate, which may block it and decides its
// fault; the errors are the driver's own types, so lwt.Definite classifies them as on a
// real node.
//
// conformance_test.go runs the same scenarios on a real node and on a Cluster: where the
// two disagree, the real node wins.
package memstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/shardq/shardq/internal/store"
)

// DefaultTombstoneFailureThreshold is Cassandra's default tombstone_failure_threshold.
const DefaultTombstoneFailureThreshold = 100000

// Cluster is the simulated cluster's data: every table of one keyspace. Safe for
// concurrent use.
type Cluster struct {
	now       func() time.Time
	threshold int

	mu sync.Mutex
	// lastMicros is the last server-side timestamp handed out, ballots included: as a
	// node's ClientState does, each is strictly greater than the one before.
	lastMicros int64
	tasks      *table
	keys       *table
	queues     *table
	index      *table
	letters    *table
	signals    *table
	series     *table
	names      *table
	passes     *table
	// proposals are the conditional writes sent as stragglers (NoResponseLate) and not
	// yet committed, per table and partition key, oldest first.
	proposals map[string][]*proposal
}

// proposal is a conditional write whose Paxos round was accepted but not committed: its
// coordinator commits it late, or the next round on its partition finds it and commits it
// first, under the ballot it was sent with.
type proposal struct {
	run    func(s *state) error
	ballot int64
}

// Config configures a Cluster.
type Config struct {
	// Now is the servers' clock (one clock for the cluster): TTL expiry, local deletion
	// times, gc grace, and the ballots of conditional writes. Required.
	Now func() time.Time
	// TombstoneFailureThreshold: a read that scans more tombstones fails. Defaults to
	// 100000 (DefaultTombstoneFailureThreshold), as Cassandra's tombstone_failure_threshold.
	TombstoneFailureThreshold int
}

// ErrNoClock means a Config or ClientConfig lacks its required clock.
var ErrNoClock = errors.New("memstore: a clock is required")

// New returns an empty cluster holding shardq's schema (schema.cql).
func New(cfg Config) (*Cluster, error) {
	if cfg.Now == nil {
		return nil, ErrNoClock
	}
	if cfg.TombstoneFailureThreshold <= 0 {
		cfg.TombstoneFailureThreshold = DefaultTombstoneFailureThreshold
	}
	return &Cluster{
		now:       cfg.Now,
		threshold: cfg.TombstoneFailureThreshold,
		tasks:     newTable("tasks", 600, 0),
		keys:      newTable("task_keys", defaultGCGrace, 0),
		queues:    newTable("queues", defaultGCGrace, 0),
		index:     newTable("task_index", 600, 0),
		letters:   newTable("dead_letters", defaultGCGrace, 2592000),
		signals:   newTable("queue_signals", 600, 86400),
		series:    newTable("series", defaultGCGrace, 0),
		names:     newTable("series_names", defaultGCGrace, 0),
		passes:    newTable("queue_passes", 600, 86400),
	}, nil
}

// ClientConfig is one client process's view.
type ClientConfig struct {
	// Clock is the client's clock: the write timestamp of every write that carries none of
	// its own (gocql's client-side timestamps). Required.
	Clock func() time.Time
	// Gate is asked before each request (each CQL request the Cassandra implementation
	// would send: each page of a paged read, each batch, each statement). It may block
	// and decides the request's fault. nil: none.
	Gate Gate
	// Later receives the write of each request that met NoResponseLate, to run when it
	// chooses (or never). nil: it applies at once.
	Later func(apply func())
}

// Client returns the store as the client cfg describes sees it. It panics without a
// Clock, as New fails without Now.
func (c *Cluster) Client(cfg ClientConfig) store.Store {
	if cfg.Clock == nil {
		panic(ErrNoClock)
	}
	return &client{c: c, clock: cfg.Clock, gate: cfg.Gate, later: cfg.Later}
}

// Request is one CQL request, as the Gate sees it.
type Request struct {
	Table                      string // "tasks", "task_keys", ...
	Op                         string // a short name: "Locks.Take", "Leasing.Rows/page", ...
	Key                        string // the partition key as text, components joined by ':'
	Write, Conditional, Serial bool
}

// Fault is what befalls a request.
type Fault int8

const (
	None Fault = iota
	// Unavailable is refused, nothing applied: a *driver.Error of code
	// driver.CodeUnavailable (definite).
	Unavailable
	// Overloaded is refused, nothing applied: code driver.CodeOverloaded (definite).
	Overloaded
	// TimeoutLost timed out, not applied: code driver.CodeWriteTimeout for a write,
	// driver.CodeReadTimeout for a read.
	TimeoutLost
	// TimeoutApplied is applied, then the same timeout error (reads: as TimeoutLost).
	TimeoutApplied
	// NoResponseLost: the client gave up before an answer, not applied: a *driver.Error
	// that is Unanswered.
	NoResponseLost
	// NoResponseApplied is the same error, but the write applied.
	NoResponseApplied
	// NoResponseLate is the same error, and the write applies later: a straggler, which a
	// coordinator or a replica still applies after its client gave up. A plain write lands
	// when the client's Later runs it, with the write timestamps it was sent with (a
	// coordinator's, of the time it was sent) and TTLs counted from when it lands. A
	// conditional write's round was accepted and is committed when Later runs it or, if
	// sooner, by the next conditional write or SERIAL read of its partition (which
	// finishes an accepted round before its own), under its ballot of when it was sent;
	// its condition is judged when it is committed (a real round judged it when sent, which
	// differs only where a plain write came between). Reads meet it as NoResponseApplied.
	NoResponseLate
)

// Gate decides a request's fault; an error (the ctx ended: the process crashed) is
// returned as it is, with nothing applied.
type Gate func(ctx context.Context, r Request) (Fault, error)

type client struct {
	c     *Cluster
	clock func() time.Time
	gate  Gate
	later func(apply func())
}

func (cl *client) Tasks() store.Tasks             { return tasks{cl} }
func (cl *client) Leasing() store.Leasing         { return leasing{cl} }
func (cl *client) Locks() store.Locks             { return locks{cl} }
func (cl *client) Keys() store.Keys               { return keys{cl} }
func (cl *client) Queues() store.Queues           { return queues{cl} }
func (cl *client) Index() store.Index             { return index{cl} }
func (cl *client) DeadLetters() store.DeadLetters { return letters{cl} }
func (cl *client) Signals() store.Signals         { return signals{cl} }
func (cl *client) Series() store.Series           { return series{cl} }
func (cl *client) Scans() store.Scans             { return scans{cl} }

// clientStamp is the write timestamp gocql gives a request that carries none of its own.
func (cl *client) clientStamp() int64 { return cl.clock().UnixNano() / 1000 }

// exec sends one request: the Gate decides its fault, and run, which executes it on the
// cluster's data under the cluster's lock, runs unless the fault says it did not apply.
func (cl *client) exec(ctx context.Context, r Request, run func(s *state) error) error {
	if err := ctx.Err(); err != nil {
		return err // gocql sends nothing on an ended context
	}
	fault := None
	if cl.gate != nil {
		var err error
		if fault, err = cl.gate(ctx, r); err != nil {
			return err
		}
	}
	switch fault {
	case Unavailable:
		return unavailable(r.Conditional || r.Serial)
	case Overloaded:
		return overloaded()
	case TimeoutLost, NoResponseLost:
		return timeout(fault, r)
	case TimeoutApplied, NoResponseApplied, NoResponseLate:
		if !r.Write {
			return timeout(fault, r)
		}
	}
	if fault == NoResponseLate && cl.later != nil {
		cl.straggle(r, run)
		return timeout(fault, r)
	}
	cl.c.mu.Lock()
	if r.Conditional || r.Serial {
		cl.c.commit(r)
	}
	err := run(cl.c.state())
	cl.c.mu.Unlock()
	if err != nil || fault == None {
		return err
	}
	return timeout(fault, r)
}

// straggle hands run, the write of request r sent now, to the client's Later, and for a
// conditional write records it as its partition's accepted proposal.
func (cl *client) straggle(r Request, run func(s *state) error) {
	cl.c.mu.Lock()
	defer cl.c.mu.Unlock()
	if !r.Conditional {
		sent := cl.c.now().UnixMicro()
		cl.later(func() {
			cl.c.mu.Lock()
			defer cl.c.mu.Unlock()
			s := cl.c.state()
			s.sent = sent
			_ = run(s)
		})
		return
	}
	p := &proposal{run: run, ballot: cl.c.state().serverStamp()}
	k := r.Table + "|" + r.Key
	if cl.c.proposals == nil {
		cl.c.proposals = map[string][]*proposal{}
	}
	cl.c.proposals[k] = append(cl.c.proposals[k], p)
	cl.later(func() {
		cl.c.mu.Lock()
		defer cl.c.mu.Unlock()
		cl.c.commitOne(k, p)
	})
}

// commit commits the accepted proposals of r's partition, as the Paxos round of r does
// before its own. The caller holds c.mu.
func (c *Cluster) commit(r Request) {
	if len(c.proposals) == 0 {
		return
	}
	k := r.Table + "|" + r.Key
	for _, p := range slices.Clone(c.proposals[k]) {
		c.commitOne(k, p)
	}
}

// commitOne commits p, a proposal of partition k, unless it was already (it is no longer
// among k's). The caller holds c.mu.
func (c *Cluster) commitOne(k string, p *proposal) {
	i := slices.Index(c.proposals[k], p)
	if i < 0 {
		return
	}
	c.proposals[k] = slices.Delete(c.proposals[k], i, i+1)
	if len(c.proposals[k]) == 0 {
		delete(c.proposals, k)
	}
	s := c.state()
	s.sent = p.ballot
	_ = p.run(s)
}

// state is the cluster at the time of one request: the servers' clock read once.
type state struct {
	c   *Cluster
	sec int64 // nowInSec: TTL expiry and local deletion times
	// sent is when a straggler was sent, in Unix microseconds (zero for a request that
	// applies when sent): the coordinator stamped it then.
	sent int64
}

func (c *Cluster) state() *state { return &state{c: c, sec: c.now().Unix()} }

// serverStamp is a timestamp the coordinator chooses: a ballot, or the write timestamp
// of a statement sent without one. Each is greater than every one before.
func (s *state) serverStamp() int64 {
	if s.sent != 0 {
		s.sent++
		return s.sent - 1
	}
	m := s.c.now().UnixMicro()
	if m <= s.c.lastMicros {
		m = s.c.lastMicros + 1
	}
	s.c.lastMicros = m
	return m
}

// query is a read of one partition of t within slices, up to limit rows (math.MaxInt:
// no LIMIT clause) in pages of pageSize (0 or less: unpaged).
type query struct {
	req      Request
	t        *table
	pk       string
	slices   []slice
	limit    int
	pageSize int
}

// read runs q page by page, each page one request: extract copies each row's values
// under the cluster's lock, and consume takes them after it, in order, until it returns
// false. A page that fails returns its error after the pages before were consumed, as
// the driver's iterator does.
func read[T any](ctx context.Context, cl *client, q query, extract func(s *state, r *row) T, consume func(T) bool) error {
	sls := normalize(q.slices)
	remaining, after := q.limit, ""
	for {
		size := remaining
		if q.pageSize > 0 && q.pageSize < size {
			size = q.pageSize
		}
		var page []T
		n := 0
		err := cl.exec(ctx, q.req, func(s *state) error {
			if q.limit <= 0 {
				return invalid("LIMIT must be strictly positive")
			}
			if q.req.Serial {
				s.serverStamp() // a SERIAL read runs a Paxos round of its own
			}
			var err error
			n, after, err = s.read(q.t, q.pk, sls, after, size, q.req.Serial, func(r *row) { page = append(page, extract(s, r)) })
			return err
		})
		if err != nil {
			return err
		}
		for _, v := range page {
			if !consume(v) {
				return nil
			}
		}
		// A full page may have more behind it: the driver asks for the next one.
		if remaining -= n; n < size || remaining == 0 {
			return nil
		}
	}
}

// each mirrors fanout.Each, one call after another: a single call's error as it is,
// several calls' joined.
func each(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	for i := range n {
		errs[i] = fn(i)
	}
	return errors.Join(errs...)
}
