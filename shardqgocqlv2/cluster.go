package shardqgocqlv2

import (
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shardqgocqlv2/internal/hostpolicy"
)

// The driver settings RecommendedCluster makes, the same as shardqgocql's, whose docs say
// why.
const (
	RecommendedTimeout           = driver.RecommendedTimeout
	RecommendedConnectTimeout    = driver.RecommendedConnectTimeout
	RecommendedReconnectInterval = driver.RecommendedReconnectInterval
	RecommendedRetries           = driver.RecommendedRetries
)

// RecommendedCluster sets on c the driver options shardq runs with, as
// shardqgocql.RecommendedCluster does for github.com/gocql/gocql, and returns c:
//
//   - host selection: the policy already in c (make it token-aware), or token-aware
//     round robin when there is none, wrapped so that a node that stops answering goes
//     behind the other replicas until it answers promptly again (a frozen node keeps its
//     connections open, and the partitions it leads would stop with it);
//   - Timeout RecommendedTimeout, ConnectTimeout RecommendedConnectTimeout and
//     ReconnectInterval RecommendedReconnectInterval;
//   - a retry policy of RecommendedRetries retries, on the next node, for plain
//     statements.
//
// Call it once per ClusterConfig, after setting a HostSelectionPolicy of your own if you
// have one, and make one session from it: the policy it sets serves a single session.
func RecommendedCluster(c *gocql.ClusterConfig) *gocql.ClusterConfig {
	inner := c.PoolConfig.HostSelectionPolicy
	if inner == nil {
		// Unshuffled, as v1's default is: every request of a partition goes to its first
		// replica first, until the wrapper moves a silent one behind the others.
		inner = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy(), gocql.DoNotShuffleReplicas())
	}
	c.PoolConfig.HostSelectionPolicy = hostpolicy.Wrap(inner, hostpolicy.Config{
		// Below the speculative delay, so a read abandoned for its copy counts against
		// its node.
		Slow:       speculativeDelay / 2,
		Backoff:    time.Second,
		MaxBackoff: 16 * time.Second,
	})
	c.Timeout = RecommendedTimeout
	c.ConnectTimeout = RecommendedConnectTimeout
	c.ReconnectInterval = RecommendedReconnectInterval
	c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: RecommendedRetries}
	return c
}
