// Package cqlcluster builds the gocql cluster configuration that shardq recommends to users
// (shardq.RecommendedCluster is Recommended) and that its tests, demo and benchmarks share,
// so all of them talk to Cassandra the way users are told to.
package cqlcluster

import (
	"os"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/hostpolicy"
)

// HostsEnv names the environment variable holding a comma-separated host list
// (host or host:port). When set, it wins over every other way of finding a cluster.
const HostsEnv = "SHARDQ_CASSANDRA_HOSTS"

// EnvHosts returns the hosts named in HostsEnv, or nil when it is unset or empty.
func EnvHosts() []string {
	var hosts []string
	for _, h := range strings.Split(os.Getenv(HostsEnv), ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// New returns Recommended's config for hosts. Each call makes a new one:
// its host selection policy serves one session.
func New(hosts ...string) *gocql.ClusterConfig {
	return Recommended(gocql.NewCluster(hosts...))
}

// The driver settings Recommended makes: shardq.RecommendedTimeout's doc and its
// siblings' say why.
const (
	Timeout           = driver.RecommendedTimeout
	ConnectTimeout    = driver.RecommendedConnectTimeout
	ReconnectInterval = driver.RecommendedReconnectInterval
	Retries           = driver.RecommendedRetries
)

// Recommended is shardq.RecommendedCluster.
func Recommended(c *gocql.ClusterConfig) *gocql.ClusterConfig {
	inner := c.PoolConfig.HostSelectionPolicy
	if inner == nil {
		inner = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	}
	c.PoolConfig.HostSelectionPolicy = hostpolicy.Wrap(inner, hostpolicy.Config{
		// Below the speculative delay, so a read abandoned for its copy counts against
		// its node.
		Slow:       gocqlv1.SpeculativeDelay / 2,
		Backoff:    time.Second,
		MaxBackoff: 16 * time.Second,
	})
	c.Timeout = Timeout
	c.ConnectTimeout = ConnectTimeout
	c.ReconnectInterval = ReconnectInterval
	c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: Retries}
	return c
}

// AdminTimeout is the driver timeout of Admin sessions.
const AdminTimeout = 30 * time.Second

// Admin returns New's config with a driver timeout of AdminTimeout, for sessions that
// create and drop keyspaces: a loaded node can take seconds over a schema change, and a
// schema change sent again to another node before the first is done can create a table
// twice.
func Admin(hosts ...string) *gocql.ClusterConfig {
	c := New(hosts...)
	c.Timeout = AdminTimeout
	return c
}
