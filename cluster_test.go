package shardq_test

import (
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
)

func TestRecommendedCluster(t *testing.T) {
	t.Parallel()
	c := gocql.NewCluster("127.0.0.1")
	require.Same(t, c, shardq.RecommendedCluster(c))
	require.Equal(t, shardq.RecommendedTimeout, c.Timeout)
	require.Equal(t, shardq.RecommendedConnectTimeout, c.ConnectTimeout)
	require.Equal(t, shardq.RecommendedReconnectInterval, c.ReconnectInterval)
	require.Equal(t, &gocql.SimpleRetryPolicy{NumRetries: shardq.RecommendedRetries}, c.RetryPolicy)
	policy := c.PoolConfig.HostSelectionPolicy
	require.NotNil(t, policy)

	// Calling it again keeps the policy: one wrapper, not two.
	shardq.RecommendedCluster(c)
	require.Same(t, policy, c.PoolConfig.HostSelectionPolicy)
}
