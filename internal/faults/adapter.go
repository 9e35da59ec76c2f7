//go:build faults

package faults

import (
	"testing"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/driver"
)

// Adapter is how the fault tests reach the cluster through one driver adapter: each test
// binary that runs them (one per adapter's module) passes its own.
type Adapter struct {
	// Name tells the adapters' figures apart in the report lines.
	Name string
	// Connect returns a Driver on a session bound to keyspace, made as a service is told
	// to make one (the adapter's RecommendedCluster and RecommendedTimeout), closed when t
	// ends.
	Connect func(t testing.TB, keyspace string) *shardq.Driver
	// OneNode returns a session made from the adapter's RecommendedCluster that knows
	// host alone, closed when t ends.
	OneNode func(t testing.TB, host string) driver.Session
	// SpeculativeDelay is how long the adapter's plain reads wait for their node before a
	// copy goes to another.
	SpeculativeDelay time.Duration
}
