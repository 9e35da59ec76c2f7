package shardqgocqlv2_test

import (
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/drivertest"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// session opens a v2 session on a fresh keyspace, made and dropped through the v1
// helpers of the tests of the main module. Its timeout is that of sessions that change
// the schema: the conformance suite creates a table per case.
func session(t *testing.T) *gocql.Session {
	t.Helper()
	c := shardqgocqlv2.RecommendedCluster(gocql.NewCluster(cassandratest.Hosts(t)...))
	c.Keyspace = cassandratest.Keyspace(t)
	c.Timeout = 30 * time.Second
	s, err := c.CreateSession()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// The adapter meets the expectations every driver's adapter is held to.
func TestConformance(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, func(t *testing.T) driver.Session { return shardqgocqlv2.New(session(t)).Session() })
}

// RecommendedCluster makes cqlcluster's settings, and wraps the host selection policy
// once however often it is called.
func TestRecommendedCluster(t *testing.T) {
	t.Parallel()
	c := shardqgocqlv2.RecommendedCluster(gocql.NewCluster("127.0.0.1"))
	require.Equal(t, time.Second, c.Timeout)
	require.Equal(t, 5*time.Second, c.ConnectTimeout)
	require.Equal(t, 10*time.Second, c.ReconnectInterval)
	require.Equal(t, &gocql.SimpleRetryPolicy{NumRetries: 2}, c.RetryPolicy)
	p := c.PoolConfig.HostSelectionPolicy
	require.NotNil(t, p)
	require.Same(t, p, shardqgocqlv2.RecommendedCluster(c).PoolConfig.HostSelectionPolicy)
}
