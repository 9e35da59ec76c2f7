// Package cassandratest gives each test its own keyspace on a real Cassandra cluster.
//
// The cluster is found, once per test binary, in this order:
//  1. the hosts in SHARDQ_CASSANDRA_HOSTS;
//  2. a node answering on 127.0.0.1:9042 (started by `make cassandra-start`);
//  3. a cassandra:5.0 container through testcontainers-go, where a Docker engine answers.
//
// Otherwise the test fails, naming `make cassandra-start`. No test is ever skipped for
// lack of a server.
package cassandratest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/gocql/gocql"
	"github.com/testcontainers/testcontainers-go"
	tccassandra "github.com/testcontainers/testcontainers-go/modules/cassandra"

	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/schema"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

// Image is the container image used when a Docker engine is the only way to a server.
const Image = "cassandra:5.0"

// RFEnv names the environment variable that sets test keyspaces' replication factor.
// Defaults to 1.
const RFEnv = "SHARDQ_CASSANDRA_RF"

var (
	findOnce  sync.Once
	hosts     []string
	findErr   error
	adminOnce sync.Once
	admin     *gocql.Session
	adminErr  error
)

// Hosts returns the cluster's contact points, failing the test when there is no cluster.
func Hosts(t testing.TB) []string {
	t.Helper()
	findOnce.Do(func() { hosts, findErr = find() })
	if findErr != nil {
		t.Fatalf("no Cassandra for tests: %v", findErr)
	}
	return hosts
}

func find() ([]string, error) {
	if h := cqlcluster.EnvHosts(); len(h) > 0 {
		return h, nil
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:9042", time.Second); err == nil {
		conn.Close()
		return []string{"127.0.0.1"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if p, err := testcontainers.NewDockerProvider(); err == nil && p.Health(ctx) == nil {
		c, err := tccassandra.Run(ctx, Image)
		if err != nil {
			return nil, fmt.Errorf("starting %s with testcontainers: %w", Image, err)
		}
		host, err := c.ConnectionHost(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the container's address: %w", err)
		}
		return []string{host}, nil
	}
	return nil, fmt.Errorf("set %s, or start a local node with `make cassandra-start`, "+
		"or make a Docker engine reachable", cqlcluster.HostsEnv)
}

func adminSession(t testing.TB) *gocql.Session {
	h := Hosts(t)
	adminOnce.Do(func() { admin, adminErr = cqlcluster.Admin(h...).CreateSession() })
	if adminErr != nil {
		t.Fatalf("connecting to Cassandra at %v: %v", h, adminErr)
	}
	return admin
}

// Keyspace creates a keyspace for this test alone and drops it when the test ends.
func Keyspace(t testing.TB) string {
	t.Helper()
	s := adminSession(t)
	name := keyspaceName(t.Name())
	if err := createKeyspace(s, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropKeyspace(s, name); err != nil {
			t.Errorf("dropping keyspace %s: %v", name, err)
		}
	})
	return name
}

// RF returns the replication factor of test keyspaces, failing the test when RFEnv
// holds something else than a positive number.
func RF(t testing.TB) int {
	t.Helper()
	rf, err := replicationFactor()
	if err != nil {
		t.Fatal(err)
	}
	return rf
}

func replicationFactor() (int, error) {
	v := os.Getenv(RFEnv)
	if v == "" {
		return 1, nil
	}
	rf, err := strconv.Atoi(v)
	if err != nil || rf < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number", RFEnv, v)
	}
	return rf, nil
}

// createKeyspace makes keyspace name with the replication factor RFEnv asks for.
func createKeyspace(admin *gocql.Session, name string) error {
	rf, err := replicationFactor()
	if err != nil {
		return err
	}
	stmt := fmt.Sprintf(`CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}`, name, rf)
	if err := exec(admin, stmt); err != nil {
		return fmt.Errorf("creating keyspace %s: %w", name, err)
	}
	return nil
}

// Timeout is the driver timeout of test sessions. Tests assert what the library does,
// not how fast the machine answers: on a two-core box running test packages side by side
// (three nodes' JVMs at RF 3), a node's answer has taken over shardq.RecommendedTimeout
// and failed tests with an error the library reports as it should. Tests of what the
// library does when a node does not answer set RecommendedTimeout themselves.
const Timeout = 5 * time.Second

// connect opens a session bound to keyspace; each configure func may change the
// cluster config first.
func connect(keyspace string, configure ...func(*gocql.ClusterConfig)) (*gocql.Session, error) {
	c := cqlcluster.New(hosts...)
	c.Keyspace = keyspace
	c.Timeout = Timeout
	for _, f := range configure {
		f(c)
	}
	s, err := c.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connecting to keyspace %s: %w", keyspace, err)
	}
	return s, nil
}

// Session returns a session bound to a fresh keyspace of this test's own, closed and
// dropped when the test ends.
func Session(t testing.TB) *gocql.Session {
	t.Helper()
	return SessionFor(t, Keyspace(t))
}

// DDLSession is Session with the driver timeout of admin sessions, for tests that change
// the schema themselves: a busy node can take longer over a schema change than
// shardq.RecommendedTimeout, which the other sessions use.
func DDLSession(t testing.TB) *gocql.Session {
	t.Helper()
	return SessionFor(t, Keyspace(t), func(c *gocql.ClusterConfig) { c.Timeout = cqlcluster.AdminTimeout })
}

// SchemaSession is Session with shardq's schema applied, on a SchemaKeyspace.
func SchemaSession(t testing.TB) *gocql.Session {
	t.Helper()
	return SessionFor(t, SchemaKeyspace(t))
}

// ApplySchema applies shardq's schema through session.
func ApplySchema(t testing.TB, session *gocql.Session) {
	t.Helper()
	if err := withDDL(func(ctx context.Context) error { return applySchema(ctx, session) }); err != nil {
		t.Fatal(err)
	}
}

// applySchema applies shardq's schema through session, then waits until every replica
// serves each of its tables. At RF 3, a write made right after shardq.ApplySchema had
// seen the nodes agree on the schema failed with INCOMPATIBLE_SCHEMA from two replicas
// of three: a replica may answer before it has the new table.
func applySchema(ctx context.Context, session *gocql.Session) error {
	if err := schema.Apply(ctx, gocqlv1.New(session), schemaStatements()); err != nil {
		return err
	}
	for _, table := range schemaTables() {
		for {
			err := session.Query("SELECT * FROM " + table + " LIMIT 1").Consistency(gocql.All).WithContext(ctx).Exec()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("reading %s on every replica: %w", table, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// SessionFor returns a session bound to keyspace, closed when the test ends. Each
// configure func may change the cluster config first (to add an observer, say).
func SessionFor(t testing.TB, keyspace string, configure ...func(*gocql.ClusterConfig)) *gocql.Session {
	t.Helper()
	Hosts(t)
	s, err := connect(keyspace, configure...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// ExampleSession is SchemaSession for examples, which have no *testing.T: it panics where
// a test would fail, and the returned func closes the session and gives the keyspace
// back to the pool. The keyspace has the schema already, so the example's own
// ApplySchema finds nothing to change: at RF 3 making one took 100 s of an example.
func ExampleSession() (*gocql.Session, func()) {
	_, ks, giveBack := ExampleKeyspace()
	s, err := connect(ks)
	if err != nil {
		panic(err)
	}
	return s, func() {
		s.Close()
		giveBack()
	}
}

// ExampleKeyspace is ExampleSession for examples that connect themselves (with another
// driver): the hosts and a pooled keyspace with the schema, and the func that gives it
// back to the pool.
func ExampleKeyspace() (nodes []string, keyspace string, done func()) {
	findOnce.Do(func() { hosts, findErr = find() })
	adminOnce.Do(func() {
		if findErr == nil {
			admin, adminErr = cqlcluster.Admin(hosts...).CreateSession()
		}
	})
	for _, err := range []error{findErr, adminErr} {
		if err != nil {
			panic(err)
		}
	}
	ks, err := takeKeyspace(admin)
	if err != nil {
		panic(err)
	}
	return hosts, ks, func() { giveBack(ks) }
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// keyspaceName makes a valid, unique keyspace name (at most 48 characters) that still
// says which test it belongs to.
func keyspaceName(test string) string {
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(test), "_"), "_")
	if len(base) > 30 {
		base = base[:30]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t_" + base + "_" + hex.EncodeToString(b[:])
}

// CountTaskRows counts the task rows (kind 1: due, waiting or leased) in the partitions of
// l's ring, one partition at a time. A count over the whole table, even paged, is a
// range scan that must walk every tombstone a drained queue left before it can answer,
// and on a node busy with parallel packages it outlasted the driver's timeout. A count
// of one partition walks its tombstones too: one that fails is read again, up to three
// times (a read changes nothing).
func CountTaskRows(t testing.TB, session *gocql.Session, l shard.Layout) int {
	t.Helper()
	total := 0
	for b := range l.BucketCount {
		for sh := range l.ShardCount {
			var n int
			key := shard.FormatKey(l.Ring(), b, sh)
			var err error
			for range 3 {
				if err = session.Query(`SELECT count(*) FROM tasks WHERE shard_key = ? AND kind = 1`, key).Scan(&n); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("counting task rows of %s: %v", key, err)
			}
			total += n
		}
	}
	return total
}

// drivers holds the Driver of each live session Driver made.
var drivers sync.Map // weak.Pointer[gocql.Session] -> *shardqtype.Driver

// Driver returns the shardq driver of s, the same for every call, so that the parts a
// test builds on one session share what their driver keeps, as a service's parts built
// on one Driver do.
func Driver(s *gocql.Session) *shardqtype.Driver {
	key := weak.Make(s)
	if d, ok := drivers.Load(key); ok {
		return d.(*shardqtype.Driver)
	}
	d, loaded := drivers.LoadOrStore(key, shardqgocql.New(s))
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[gocql.Session]) { drivers.Delete(k) }, key)
	}
	return d.(*shardqtype.Driver)
}
