// Package shardqgocql runs shardq on a session of github.com/gocql/gocql:
//
//	session, err := shardqgocql.RecommendedCluster(gocql.NewCluster(hosts...)).CreateSession()
//	d := shardqgocql.New(session)
//	client, err := shardq.NewClient(d, shardq.Config{...})
//
// For the Apache Cassandra GoCQL driver v2, use shardqgocqlv2, a module of its own.
package shardqgocql

import (
	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/shardqtype"
)

// New returns the driver shardq runs on session, whose keyspace holds (or will hold,
// after shardq.ApplySchema) shardq's tables. Make one per session and build every part
// of the process on it: they share what it keeps.
func New(session *gocql.Session) *shardqtype.Driver { return driver.New(gocqlv1.New(session)) }

// The driver settings RecommendedCluster makes; the same for the v2 adapter.
const (
	// RecommendedTimeout is how long the driver waits for one node's answer. A node that
	// freezes without closing its connections holds every request sent to it this long,
	// and a worker's fetch waits for the slowest of its requests, so it is short: slow
	// answers are retried on another node (reads and plain writes, which are
	// idempotent), and a lightweight transaction left without an answer is settled by a
	// SERIAL read, as any unknown outcome is.
	RecommendedTimeout = driver.RecommendedTimeout
	// RecommendedConnectTimeout bounds opening a connection to a node.
	RecommendedConnectTimeout = driver.RecommendedConnectTimeout
	// RecommendedReconnectInterval is how often the driver tries nodes it holds down.
	RecommendedReconnectInterval = driver.RecommendedReconnectInterval
	// RecommendedRetries is how many times the driver retries a plain statement that
	// failed, each time on the next node. shardq never lets the driver retry a
	// lightweight transaction.
	RecommendedRetries = driver.RecommendedRetries
)

// RecommendedCluster sets on c the driver options shardq's producers, consumers and
// workers should run with on a cluster of several nodes, and returns c:
//
//   - host selection: the policy already in c (make it token-aware), or token-aware
//     round robin when there is none, wrapped so that a node with a request waiting
//     longer than a few hundred milliseconds, or whose last answers were that slow or
//     lost, goes behind the other replicas until it answers promptly again (one read tries it first now and then). A frozen node keeps
//     its connections open and its peers see it up for about 20 seconds; without this,
//     the partitions it leads would stop for as long;
//   - Timeout RecommendedTimeout, ConnectTimeout RecommendedConnectTimeout and
//     ReconnectInterval RecommendedReconnectInterval;
//   - a retry policy of RecommendedRetries retries, on the next node, for plain
//     statements.
//
// shardq itself pins QUORUM and SERIAL on its statements and, on sessions made from a
// config RecommendedCluster set that know two nodes or more, sends its plain reads to a
// second replica when the first has not answered within 300 ms (gocql alone would fail
// such a read when no second node is left); it never sends a lightweight transaction
// twice. Call RecommendedCluster once per ClusterConfig, after setting a
// HostSelectionPolicy of your own if you have one, and make one session from it: like
// gocql's policies, the one it sets serves a single session.
func RecommendedCluster(c *gocql.ClusterConfig) *gocql.ClusterConfig {
	return cqlcluster.Recommended(c)
}
