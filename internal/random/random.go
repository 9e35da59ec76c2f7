// Package random is the randomness of shardq's IDs, shard choices and jitters: crypto/rand
// and math/rand/v2's by default. The simulator seeds it, so that a run replays.
package random

import (
	crand "crypto/rand"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// seeded draws from a stream of its own for each call path (the names of the functions on
// the caller's stack): goroutines that wake at the same instant draw in the Go scheduler's
// order, and one shared stream would hand a producer's ID to a worker in one run and the
// other way round in the next, so a seed would not replay.
type seeded struct {
	seed uint64
	mu   sync.Mutex
	n    map[uint64]uint64 // draws so far by call path
}

var current atomic.Pointer[seeded] // nil: crypto/rand and math/rand/v2's global source

// Seed makes every draw come from streams seeded with seed until restore is called. Not
// for production: the draws of one process then repeat from run to run.
func Seed(seed uint64) (restore func()) {
	s := &seeded{seed: seed, n: map[uint64]uint64{}}
	prev := current.Swap(s)
	return func() { current.CompareAndSwap(s, prev) }
}

// source is the stream of the caller's call path, advanced past the draws made before.
func (s *seeded) source() *rand.Rand {
	var pcs [32]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	h := fnv.New64a()
	for {
		f, more := frames.Next()
		h.Write([]byte(f.Function))
		if !more {
			break
		}
	}
	path := h.Sum64()
	s.mu.Lock()
	n := s.n[path]
	s.n[path] = n + 1
	s.mu.Unlock()
	return rand.New(rand.NewPCG(s.seed^path, n))
}

// Read fills b with random bytes.
func Read(b []byte) {
	s := current.Load()
	if s == nil {
		if _, err := crand.Read(b); err != nil {
			panic("random: crypto/rand failed: " + err.Error())
		}
		return
	}
	r := s.source()
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// N returns a number in [0, n) (math/rand/v2's N).
func N[T ~int | ~int64](n T) T {
	s := current.Load()
	if s == nil {
		return rand.N(n)
	}
	return T(s.source().Int64N(int64(n)))
}

// Float64 returns a number in [0, 1).
func Float64() float64 {
	s := current.Load()
	if s == nil {
		return rand.Float64()
	}
	return s.source().Float64()
}
