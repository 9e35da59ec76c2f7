package shardqtype

import "time"

// Clock tells the time. Producers and consumers take one in their Config so that tests
// can move time; due times, lease deadlines and bucket choice all come from it.
type Clock interface {
	Now() time.Time
}

// SystemClock is this host's wall clock. Configs default to the cluster's time instead:
// the host's clock corrected by its measured offset from a coordinator's.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
