// Package cqlcluster builds the gocql cluster configuration that shardq's tests, demo and
// benchmarks share: shardq.RecommendedCluster's, so all of them talk to Cassandra the way
// we recommend to users.
package cqlcluster

import (
	"os"
	"strings"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq"
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

// New returns shardq.RecommendedCluster's config for hosts. Each call makes a new one:
// its host selection policy serves one session.
func New(hosts ...string) *gocql.ClusterConfig {
	return shardq.RecommendedCluster(gocql.NewCluster(hosts...))
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
