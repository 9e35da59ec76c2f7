package shardqgocql_test

import (
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/shardqgocql"
)

func TestRecommendedCluster(t *testing.T) {
	t.Parallel()
	c := gocql.NewCluster("127.0.0.1")
	require.Same(t, c, shardqgocql.RecommendedCluster(c))
	require.Equal(t, shardqgocql.RecommendedTimeout, c.Timeout)
	require.Equal(t, shardqgocql.RecommendedConnectTimeout, c.ConnectTimeout)
	require.Equal(t, shardqgocql.RecommendedReconnectInterval, c.ReconnectInterval)
	require.Equal(t, &gocql.SimpleRetryPolicy{NumRetries: shardqgocql.RecommendedRetries}, c.RetryPolicy)
	policy := c.PoolConfig.HostSelectionPolicy
	require.NotNil(t, policy)

	// Calling it again keeps the policy: one wrapper, not two.
	shardqgocql.RecommendedCluster(c)
	require.Same(t, policy, c.PoolConfig.HostSelectionPolicy)
}
