// Package clustertime tells the cluster's time: a host's clock corrected by how far it was
// measured from the coordinators' clocks. Lightweight transactions, which delete task rows
// and markers, are stamped by a coordinator's clock; plain writes are stamped by ours, so
// a host whose clock leads the cluster's writes rows that deletes cannot shadow, and one
// whose clock trails writes rows below the floors consumers read from. Measuring costs one
// small read of system.local per Refresh.
package clustertime

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shardq/shardq/shardqtype"
)

const (
	// Refresh is how often the offset is measured again.
	Refresh = time.Minute
	// RetryFailed is how soon a failed measure is tried again: until one succeeds, a
	// host's clock ahead of the cluster's leases tasks early.
	RetryFailed = time.Second
	// samples are taken per measure; the one with the shortest round trip counts.
	samples = 3
	// WriteLag is how far before the cluster's time plain writes are stamped: deletes
	// made after a write, which coordinators stamp, then win over it even when the
	// coordinators' clocks differ by less than this, and a driver's late retry of an insert
	// cannot bring a deleted row back.
	WriteLag = time.Second
	// Unmeasured is how much earlier plain writes are stamped, and deletes later, while
	// the host's clock is not known to run with the cluster's: after a step of its wall
	// clock, until the measure that follows (Now). It is the consumers' default
	// MaxClockSkew. Before the first measure nothing is stamped at all (Ready).
	Unmeasured = 2 * time.Second
)

// Forget is how long a node's clock reading counts after it was taken: a node that left
// the ring, or stopped answering, stops holding the cluster's time back after this.
const Forget = 10 * Refresh

// Coordinator reads a coordinator's clock and names the node that answered, or ""
// (store.Store does).
type Coordinator interface {
	Now(ctx context.Context) (at time.Time, node string, err error)
}

// Host is the clock this host keeps; tests give a skewed one.
type Host interface{ Now() time.Time }

// Stepping is a Host whose wall clock may be stepped (by NTP, or a VM resumed) apart from
// a clock that only runs: Elapsed is the time run since an instant Now returned. The
// system's clock needs no such method: the times time.Now returns carry a monotonic
// reading, which their Sub uses.
type Stepping interface {
	Host
	Elapsed(since time.Time) time.Duration
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Clock is the cluster's time as seen from this host. Safe for concurrent use.
type Clock struct {
	coord Coordinator
	host  Host
	log   *slog.Logger
	first chan struct{} // held by the Ready call measuring while none has succeeded

	mu     sync.Mutex
	offset time.Duration // cluster minus host, at the last measure
	// anchor is the host's time of the last measure and cluster the cluster's time then:
	// the cluster's time is told from them and the time run since, so a step of the host's
	// wall clock between two measures moves nothing.
	anchor, cluster time.Time
	// spread is how far the latest node's clock was ahead of the earliest one's (the
	// cluster's time) at the last measure.
	spread    time.Duration
	nodes     map[string]reading // the last reading of each node that answered a measure
	attempted time.Time          // host time of the last measure, done or failed; zero before
	failed    bool               // the last measure failed
	lastErr   error              // its error
	attempts  int                // measures ended, done or failed
	known     bool               // a measure succeeded
	// disagree is set when the wall clock and the time elapsed parted since the last
	// measure, until the next one succeeds.
	disagree  bool
	measuring bool
}

// New returns the cluster's clock read through coord, measured against host (nil: this
// host's system clock).
func New(coord Coordinator, host Host, log *slog.Logger) *Clock {
	if host == nil {
		host = systemClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Clock{coord: coord, host: host, log: log, first: make(chan struct{}, 1), nodes: map[string]reading{}}
}

// reading is a node's clock as one sample read it: at is the node's time when the host's
// clock read anchor (the middle of the sample's round trip), rtt the round trip.
type reading struct {
	anchor, at time.Time
	rtt        time.Duration
}

// Now returns the cluster's time measured last, run on by the time elapsed since, and
// measures again in the background once that measure is older than Refresh. Until Ready's
// first measure it is the host's own time.
//
// When the host's wall clock and the time elapsed disagree by more than WriteLag/2 since
// the measure, the wall clock was stepped (NTP, a VM's guest agent) or the host slept
// (the monotonic clock stops then): only a measure tells which, so one starts at once,
// and until it ends Now is the earlier of the two readings, never early, and writes are
// stamped as unmeasured.
func (c *Clock) Now() time.Time {
	now := c.host.Now()
	c.mu.Lock()
	at := now
	every := Refresh
	if c.failed {
		every = RetryFailed
	}
	stale := !c.attempted.IsZero() && c.elapsed(now, c.attempted) >= every
	if c.known {
		at = c.cluster.Add(c.elapsed(now, c.anchor))
		if wall := now.Add(c.offset); wall.Sub(at).Abs() > WriteLag/2 {
			c.disagree, stale = true, !c.attempted.IsZero()
			if wall.Before(at) {
				at = wall
			}
		}
	}
	stale = stale && !c.measuring
	if stale {
		c.measuring = true
	}
	c.mu.Unlock()
	if stale {
		go c.measureInBackground()
	}
	return at
}

// elapsed is the time run from since to now, two times the host's clock returned.
func (c *Clock) elapsed(now, since time.Time) time.Duration {
	if s, ok := c.host.(Stepping); ok {
		return s.Elapsed(since) - s.Elapsed(now)
	}
	return now.Sub(since)
}

// Ready returns nil once a measure of the cluster's time has succeeded. Until then each
// call measures (one at a time: a call that waited for another's measure takes its
// outcome, and ctx may end the wait) and returns shardqtype.ErrClockUnmeasured wrapping
// the failure: no time a process hands out or stamps may come from the host's own clock,
// whose offset from the cluster's could be anything. Producers, consumers and series call
// it before their first write or take.
func (c *Clock) Ready(ctx context.Context) error {
	c.mu.Lock()
	known, seen := c.known, c.attempts
	c.mu.Unlock()
	if known {
		return nil
	}
	select {
	case c.first <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", shardqtype.ErrClockUnmeasured, ctx.Err())
	}
	defer func() { <-c.first }()
	c.mu.Lock()
	known, last, ended := c.known, c.lastErr, c.attempts != seen
	c.mu.Unlock()
	switch {
	case known:
		return nil
	case ended:
		return fmt.Errorf("%w: %w", shardqtype.ErrClockUnmeasured, last)
	}
	if _, err := c.Measure(ctx); err != nil {
		c.log.WarnContext(ctx, "measuring the cluster's clock; nothing is written or taken until it succeeds", "error", err)
		return fmt.Errorf("%w: %w", shardqtype.ErrClockUnmeasured, err)
	}
	return nil
}

// Offset returns how far the cluster's clock was last measured ahead of the host's.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

func (c *Clock) measureInBackground() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Measure(ctx); err != nil {
		c.log.WarnContext(ctx, "measuring the cluster's clock; using the last offset", "error", err)
	}
}

// Measure reads coordinators' clocks and takes the cluster's time from them. Each node
// that answers keeps its last reading (the sample with the shortest round trip), for
// Forget; the cluster's time is the earliest of those nodes' clocks, so a consumer
// judging due times by it is early by no node's clock, and plain writes stamped behind it
// lose to deletes any of them stamps. The spread up to the latest is added to deletes
// (DeleteStamp), which must win over writes any node stamped, and reported when it
// exceeds WriteLag/2. It returns the offset of the host's clock from the cluster's.
func (c *Clock) Measure(ctx context.Context) (time.Duration, error) {
	got := map[string]reading{}
	var err error
	for range samples {
		sent := c.host.Now()
		var at time.Time
		var node string
		if at, node, err = c.coord.Now(ctx); err != nil {
			break
		}
		rtt := c.elapsed(c.host.Now(), sent)
		if r, ok := got[node]; !ok || rtt < r.rtt {
			got[node] = reading{anchor: sent.Add(rtt / 2), at: at, rtt: rtt}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.measuring, c.attempted, c.failed = false, c.host.Now(), len(got) == 0
	c.attempts++
	if len(got) == 0 {
		c.lastErr = fmt.Errorf("clustertime: reading a coordinator's clock: %w", err)
		return 0, c.lastErr
	}
	if c.disagree {
		// The host's clock stepped or the host slept since: elapsed time no longer
		// carries older readings forward.
		clear(c.nodes)
	}
	var anchor time.Time
	for node, r := range got {
		c.nodes[node] = r
		if anchor.IsZero() || c.elapsed(r.anchor, anchor) > 0 {
			anchor = r.anchor
		}
	}
	// Each node's clock carried to anchor by the time elapsed since its reading.
	var earliest, latest time.Time
	for node, r := range c.nodes {
		since := c.elapsed(anchor, r.anchor)
		if since > Forget {
			delete(c.nodes, node)
			continue
		}
		at := r.at.Add(since)
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
		if latest.IsZero() || at.After(latest) {
			latest = at
		}
	}
	c.anchor, c.cluster, c.offset = anchor, earliest, earliest.Sub(anchor)
	c.spread, c.known, c.disagree = latest.Sub(earliest), true, false
	if c.offset.Abs() > WriteLag/2 {
		c.log.WarnContext(ctx, "this host's clock is off the cluster's; shardq corrects its times, but fix the host's time sync",
			"offset", c.offset)
	}
	if c.spread > WriteLag/2 {
		c.log.WarnContext(ctx, "the cluster's nodes' clocks disagree; shardq takes the earliest for due times and stamps deletes past the latest, but fix the nodes' time sync",
			"spread", c.spread, "nodes", len(c.nodes))
	}
	return c.offset, nil
}

// Uncertainty bounds how far ahead of the cluster's time Now may read, but for the host
// clock's drift since the last measure: half the longest round trip of the readings that
// measure kept (each node's clock was read somewhere within its round trip). Before a
// measure has succeeded it is Unmeasured.
func (c *Clock) Uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return Unmeasured
	}
	var rtt time.Duration
	for _, r := range c.nodes {
		rtt = max(rtt, r.rtt)
	}
	return rtt / 2
}

// Spread returns how far the latest node's clock was measured ahead of the earliest's.
func (c *Clock) Spread() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spread
}

// Stamp is the write timestamp, in microseconds, of a plain write made at writer's time
// now: WriteLag before the earlier of now and the cluster's time (and Unmeasured more
// while no measure has succeeded). A writer whose clock trails stamps as it writes row
// IDs; one whose clock leads cannot stamp past the deletes that will follow.
func (c *Clock) Stamp(now time.Time) int64 {
	if cluster := c.Now(); cluster.Before(now) {
		now = cluster
	}
	return now.Add(-WriteLag - c.unknown()).UnixMicro()
}

// unknown is how far the host's clock may be off the cluster's beyond what was measured.
func (c *Clock) unknown() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known && !c.disagree {
		return 0
	}
	return Unmeasured
}

// DeleteStamp is the write timestamp, in microseconds, of a plain delete of a row that a
// coordinator stamped (a dead letter): WriteLag past the latest node's clock measured
// (and Unmeasured more while no measure has succeeded), so the delete
// wins over the write made before it whatever this host's clock, as Stamp's writes lose
// to the coordinators' deletes.
func (c *Clock) DeleteStamp() int64 {
	return c.Now().Add(WriteLag + c.unknown() + c.Spread()).UnixMicro()
}
