// Package testclock holds clocks that tests move by hand.
package testclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock starts at a given time and moves only when told to. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock showing t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Shifted is the host's clock moved by an offset, which Add moves on: a clock that keeps
// running, for tests where real time passes between reads (a clock measured against the
// cluster's, processes that must agree). Safe for concurrent use.
type Shifted struct{ offset atomic.Int64 }

// NewShifted returns a Shifted clock d ahead of the host's.
func NewShifted(d time.Duration) *Shifted {
	c := &Shifted{}
	c.offset.Store(int64(d))
	return c
}

// Now returns the host's time moved by the offset.
func (c *Shifted) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Add moves the offset by d.
func (c *Shifted) Add(d time.Duration) { c.offset.Add(int64(d)) }
