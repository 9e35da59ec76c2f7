// Package cqlcluster builds the gocql cluster configuration that shardq's tests, demo and
// benchmarks share, so all of them talk to Cassandra the way we recommend to users.
package cqlcluster

import (
	"os"
	"strings"
	"time"

	"github.com/gocql/gocql"
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

// New returns a cluster config for hosts with token-aware routing and timeouts suited to
// a loaded local node. The default retry policy only ever sees idempotent plain
// statements: shardq sets a no-retry policy on every lightweight transaction itself.
func New(hosts ...string) *gocql.ClusterConfig {
	c := gocql.NewCluster(hosts...)
	c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	c.Consistency = gocql.LocalQuorum
	c.SerialConsistency = gocql.LocalSerial
	c.Timeout = 10 * time.Second
	c.ConnectTimeout = 10 * time.Second
	c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 2}
	return c
}
