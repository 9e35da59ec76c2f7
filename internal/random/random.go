// Package random is the randomness of shardq's IDs, shard choices and jitters: crypto/rand
// and math/rand/v2's by default. The simulator seeds it, so that a run replays.
package random

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// seeded is a seeded source shared by every goroutine of the process.
type seeded struct {
	mu sync.Mutex
	r  *rand.Rand
}

var current atomic.Pointer[seeded] // nil: crypto/rand and math/rand/v2's global source

// Seed makes every draw come from a source seeded with seed until restore is called. Not
// for production: the draws of one process then repeat from run to run.
func Seed(seed uint64) (restore func()) {
	s := &seeded{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	prev := current.Swap(s)
	return func() { current.CompareAndSwap(s, prev) }
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range b {
		b[i] = byte(s.r.Uint32())
	}
}

// N returns a number in [0, n) (math/rand/v2's N).
func N[T ~int | ~int64](n T) T {
	s := current.Load()
	if s == nil {
		return rand.N(n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return T(s.r.Int64N(int64(n)))
}

// Float64 returns a number in [0, 1).
func Float64() float64 {
	s := current.Load()
	if s == nil {
		return rand.Float64()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}
