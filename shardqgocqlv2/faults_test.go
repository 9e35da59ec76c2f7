//go:build faults

package shardqgocqlv2

import (
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/faults"
)

// v2 runs the fault tests on this adapter, made as a service is told to make its session.
var v2 = faults.Adapter{
	Name: "gocqlv2",
	Connect: func(t testing.TB, keyspace string) *shardq.Driver {
		c := RecommendedCluster(gocql.NewCluster(cassandratest.Hosts(t)...))
		c.Keyspace = keyspace
		c.Timeout = RecommendedTimeout
		s, err := c.CreateSession()
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return New(s)
	},
	OneNode: func(t testing.TB, host string) driver.Session {
		c := RecommendedCluster(gocql.NewCluster(host))
		c.HostFilter = gocql.WhiteListHostFilter(host)
		s, err := c.CreateSession()
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return New(s).Session()
	},
	SpeculativeDelay: speculativeDelay,
}

// The fault tests where the driver decides the outcome: routing around a frozen node, and
// not speculating on a session of one node. The others run on v1 alone (internal/faults),
// where they test what the library does above the driver.
func TestWorkerProcess(t *testing.T)     { faults.WorkerProcess(t, v2) }
func TestNodeFrozen(t *testing.T)        { faults.NodeFrozen(t, v2) }
func TestSlowReadOnOneNode(t *testing.T) { faults.SlowReadOnOneNode(t, v2) }
