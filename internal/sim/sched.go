package sim

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardq/shardq/internal/memstore"
)

// errCrashed is what a crashed process's requests return: nothing of them applied.
var errCrashed = errors.New("sim: process crashed")

// errOver is what requests sent after the run ended return (a clock measure a process
// started in the background as it stopped): nothing admits them any more.
var errOver = errors.New("sim: the run is over")

// sched is the network between the processes and the simulated cluster. Every request
// waits in pending until its latency, drawn from the seed, has passed; the driver
// (run's goroutine) admits the due requests one at a time, once every other goroutine is
// blocked, so the order of requests, their faults and latencies depend on the seed and on
// what the processes asked, not on the Go scheduler.
type sched struct {
	seed uint64
	// faults is the chance of a fault per request, in parts per 10,000 (0 while healed).
	faults int

	mu      sync.Mutex
	pending []*request
	seen    map[string]int // requests so far by identity, to draw each one's fate
	wake    chan struct{}  // a request was added
	over    chan struct{}  // closed when the run has ended
	trace   uint64         // a hash of every admission, to tell two runs apart
	steps   int
	// leaseFaults are when a request that makes or unmakes a lease met a fault: a swap or
	// a lease move whose outcome stayed unknown, or a drop of markers that failed, leaves
	// a marker behind, and a copy of the task with it (a documented duplicate).
	leaseFaults []time.Time
	// faultsAt are when any request met a fault, for the lateness bound.
	faultsAt []time.Time
	log      func(*request, memstore.Fault) // when set, sees every admission
	// forced is the fault that the next request of an operation by a process meets,
	// whatever the seed draws (see force).
	forced map[*proc]map[string]memstore.Fault
	counts [memstore.NoResponseLate + 1]int
	// late is the identity of the request last admitted as a straggler, whose write
	// later receives next: an admitted request runs until it blocks before drive admits
	// another, so none comes between.
	late string
}

type request struct {
	proc  *proc
	req   memstore.Request
	ident string
	due   time.Time
	admit chan memstore.Fault
	// apply, for a straggler's write (memstore.NoResponseLate), applies it when admitted:
	// it has no process, and meets no fault.
	apply func()
}

func newSched(seed uint64) *sched {
	return &sched{seed: seed, seen: map[string]int{}, wake: make(chan struct{}, 1), over: make(chan struct{}), trace: seed}
}

// gate is p's memstore.Gate.
func (s *sched) gate(p *proc) memstore.Gate {
	return func(ctx context.Context, r memstore.Request) (memstore.Fault, error) {
		select {
		case <-p.dead:
			return 0, errCrashed
		case <-s.over:
			return 0, errOver
		default:
		}
		// A request's identity names its process, statement, partition and the code path
		// that sent it (its call stack), not the order in which goroutines ran.
		stack := callers()
		ident := p.name + "|" + r.Op + "|" + r.Key + "|" + stack
		s.mu.Lock()
		n := s.seen[ident]
		s.seen[ident] = n + 1
		ident += "|" + strconv.Itoa(n)
		q := &request{proc: p, req: r, ident: ident, due: time.Now().Add(s.latency(ident)), admit: make(chan memstore.Fault, 1)}
		s.pending = append(s.pending, q)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		select {
		case f := <-q.admit:
			return f, nil
		case <-p.dead:
			s.drop(q)
			return 0, errCrashed
		case <-s.over:
			s.drop(q)
			return 0, errOver
		case <-ctx.Done():
			s.drop(q)
			return 0, ctx.Err()
		}
	}
}

func (s *sched) drop(q *request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = slices.DeleteFunc(s.pending, func(r *request) bool { return r == q })
}

// latency is a request's time on the wire: mostly a millisecond or two, now and then a
// slow replica's hundreds.
func (s *sched) latency(ident string) time.Duration {
	h := s.draw("latency", ident)
	if h%100 < 3 {
		return time.Duration(50+h/100%450) * time.Millisecond
	}
	return time.Duration(200+h/100%2800) * time.Microsecond
}

// draw is a number fixed by the seed, what and the request's identity.
func (s *sched) draw(what, ident string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(s.seed >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(what))
	h.Write([]byte(ident))
	return mix(h.Sum64())
}

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

var leaseOps = map[string]bool{"Leasing.Swap": true, "Leasing.WriteMarkers": true, "Leasing.DropMarkers": true,
	"Leasing.ReplaceMarker": true, "Leasing.DeleteMarker": true, "Leasing.MarkersThere": true, "Locks.Receipt": true}

// fault is a request's fate.
func (s *sched) fault(q *request) memstore.Fault {
	s.mu.Lock()
	f, forced := s.forced[q.proc][q.req.Op]
	delete(s.forced[q.proc], q.req.Op)
	s.mu.Unlock()
	if forced {
		return f
	}
	h := s.draw("fault", q.ident)
	if int(h%10000) >= s.faults {
		return memstore.None
	}
	switch h / 10000 % 6 {
	case 0:
		return memstore.Unavailable
	case 1:
		return memstore.Overloaded
	case 2:
		return memstore.TimeoutLost
	case 3:
		return memstore.TimeoutApplied
	case 4:
		return memstore.NoResponseLost
	}
	// Half the writes that apply unanswered land late (memstore.NoResponseLate).
	if q.req.Write && s.draw("straggle", q.ident)%2 == 0 {
		return memstore.NoResponseLate
	}
	return memstore.NoResponseApplied
}

// later is p's memstore.ClientConfig.Later: the straggler's write lands after a delay
// drawn for its request, mostly within half a second, now and then seconds or a minute
// late (a coordinator's backlog, a hint).
func (s *sched) later(apply func()) {
	s.mu.Lock()
	ident := s.late + "|late"
	var by time.Duration
	switch h := s.draw("late", ident); {
	case h%100 < 70:
		by = time.Duration(1+h/100%500) * time.Millisecond
	case h%100 < 95:
		by = time.Duration(500+h/100%4500) * time.Millisecond
	default:
		by = time.Duration(5+h/100%55) * time.Second
	}
	s.pending = append(s.pending, &request{ident: ident, due: time.Now().Add(by), apply: apply})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next returns the request to admit now, or how long until one is due (zero with none).
func (s *sched) next() (*request, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil, 0
	}
	// The requests due first, in an order that does not depend on when their goroutines ran.
	slices.SortFunc(s.pending, func(a, b *request) int {
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return compare(a.ident, b.ident)
	})
	first := s.pending[0]
	if wait := time.Until(first.due); wait > 0 {
		return nil, wait
	}
	s.pending = s.pending[1:]
	return first, 0
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *sched) admit(q *request) {
	if q.apply != nil {
		q.apply()
		s.mu.Lock()
		s.steps++
		s.trace = mix(s.trace ^ s.draw("landed", q.ident))
		s.mu.Unlock()
		return
	}
	f := s.fault(q)
	s.mu.Lock()
	if f == memstore.NoResponseLate {
		s.late = q.ident
	}
	s.steps++
	s.counts[f]++
	if f != memstore.None {
		s.faultsAt = append(s.faultsAt, time.Now())
		if leaseOps[q.req.Op] {
			s.leaseFaults = append(s.leaseFaults, time.Now())
		}
	}
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(s.trace >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(q.ident))
	h.Write([]byte{byte(f)})
	h.Write([]byte(time.Now().Format(time.RFC3339Nano)))
	s.trace = h.Sum64()
	s.mu.Unlock()
	if s.log != nil {
		s.log(q, f)
	}
	q.admit <- f
}

// callers names the calling goroutine's code path: the functions on its stack, by name,
// so that a seed gives a request the same fate in another build unless its path changed
// (program counters move with any edit). With SIM_STACKS set, it lists them, for reading.
func callers() string {
	var pcs [48]uintptr
	n := runtime.Callers(3, pcs[:])
	verbose := os.Getenv("SIM_STACKS") != ""
	var names []string
	h := fnv.New64a()
	for _, pc := range pcs[:n] {
		name := funcName(pc)
		h.Write([]byte(name))
		if verbose && strings.Contains(name, "shardq/shardq/") && !strings.Contains(name, "memstore") && !strings.Contains(name, "internal/sim") {
			names = append(names, name[strings.LastIndex(name, "/")+1:])
		}
	}
	if verbose {
		return strings.Join(names, "<")
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

var funcNames sync.Map // pc -> function name

func funcName(pc uintptr) string {
	if name, ok := funcNames.Load(pc); ok {
		return name.(string)
	}
	name := "?"
	if f := runtime.FuncForPC(pc - 1); f != nil {
		name = f.Name()
	}
	funcNames.Store(pc, name)
	return name
}

// force makes the next request of op by p meet f.
func (s *sched) force(p *proc, op string, f memstore.Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forced == nil {
		s.forced = map[*proc]map[string]memstore.Fault{}
	}
	if s.forced[p] == nil {
		s.forced[p] = map[string]memstore.Fault{}
	}
	s.forced[p][op] = f
}
