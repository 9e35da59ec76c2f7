package shardqgocqlv2_test

import (
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/storetest"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// sessionOn opens a v2 session on keyspace with RecommendedCluster's settings, as a
// service makes one, and closes it when the test ends. Its timeout is that of the v1
// sessions of cassandratest: on a node shared with other test processes, answers have
// taken longer than RecommendedTimeout, on either driver alike, and these tests assert
// what shardq does, not how fast the node answers.
func sessionOn(t *testing.T, keyspace string) *gocql.Session {
	t.Helper()
	c := shardqgocqlv2.RecommendedCluster(gocql.NewCluster(cassandratest.Hosts(t)...))
	c.Keyspace = keyspace
	c.Timeout = cassandratest.Timeout
	s, err := c.CreateSession()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// newDriver returns a driver on a v2 session of a keyspace of this test's own that has
// shardq's schema.
func newDriver(t *testing.T) *shardq.Driver {
	t.Helper()
	return shardqgocqlv2.New(sessionOn(t, cassandratest.SchemaKeyspace(t)))
}

// The store behaves on v2 as it does on v1 and as memstore imitates: the scenarios
// memstore's conformance test runs on both.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return store.Of(newDriver(t).Session()) })
}
