//go:build faults

package faults_test

import (
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/faults"
	"github.com/shardq/shardq/shardqgocql"
)

// v1 is the core module's adapter, on github.com/gocql/gocql.
var v1 = faults.Adapter{
	Name: "gocql",
	Connect: func(t testing.TB, keyspace string) *shardq.Driver {
		return cassandratest.Driver(cassandratest.SessionFor(t, keyspace, func(c *gocql.ClusterConfig) {
			c.Timeout = shardqgocql.RecommendedTimeout
		}))
	},
	OneNode: func(t testing.TB, host string) driver.Session {
		cfg := shardqgocql.RecommendedCluster(gocql.NewCluster(host))
		cfg.HostFilter = gocql.WhiteListHostFilter(host)
		s, err := cfg.CreateSession()
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return gocqlv1.New(s)
	},
	SpeculativeDelay: gocqlv1.SpeculativeDelay,
}

func TestWorkerProcess(t *testing.T) { faults.WorkerProcess(t, v1) }

// TestNodeFrozen runs first: a node another test restarted runs a cold JVM for a minute
// or so, and on two cores shared by three nodes that alone took its p99 from 0.7-0.8 s
// to 2.2 s.
func TestNodeFrozen(t *testing.T)        { faults.NodeFrozen(t, v1) }
func TestNodeKilled(t *testing.T)        { faults.NodeKilled(t, v1) }
func TestWorkersKilled(t *testing.T)     { faults.WorkersKilled(t, v1) }
func TestNodeRestarted(t *testing.T)     { faults.NodeRestarted(t, v1) }
func TestSlowReadOnOneNode(t *testing.T) { faults.SlowReadOnOneNode(t, v1) }
