package cassandratest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/lwt"
)

// schemaTimeout bounds one schema change and the wait for every node to agree on it,
// counted from when this process may make it (withDDL).
const schemaTimeout = 3 * time.Minute

// ddlMu serializes this process's schema changes; ddlFile those of every test process
// on this host against the same nodes. At RF 3, packages tested at once each made their
// parallel tests' keyspaces at once, and two applications of the schema waited over a
// minute for three nodes sharing two cores to agree: changes made one at a time are each
// agreed sooner.
var ddlMu sync.Mutex

// withDDL runs f, which makes schema changes, when no other test process on this host is
// making any on the same nodes.
func withDDL(f func(ctx context.Context) error) error {
	ddlMu.Lock()
	defer ddlMu.Unlock()
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.Join(hosts, ",")))
	path := filepath.Join(os.TempDir(), fmt.Sprintf("shardq-cassandratest-ddl-%08x.lock", h.Sum32()))
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return fmt.Errorf("opening the schema lock %s: %w", path, err)
	}
	defer file.Close()
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("taking the schema lock %s: %w", path, err)
	}
	defer func() { _ = syscall.Flock(int(file.Fd()), syscall.LOCK_UN) }()
	ctx, cancel := context.WithTimeout(context.Background(), schemaTimeout)
	defer cancel()
	return f(ctx)
}

// exec runs one schema change through admin under withDDL, waiting for the nodes to
// agree on it.
func exec(admin *gocql.Session, stmt string) error {
	return withDDL(func(ctx context.Context) error {
		if err := admin.Query(stmt).WithContext(ctx).Exec(); err != nil {
			return err
		}
		// gocql only logs it when the nodes do not agree within its wait.
		return admin.AwaitSchemaAgreement(ctx)
	})
}

// A node applies the schema changes sent to it in order, so the changes that make one
// keyspace need no agreement between them, only once after the last. The driver waits
// for every node to agree after each change: at RF 3 on two cores, where nodes learn a
// new schema version by gossip, about a second each, and a keyspace with shardq's schema
// is sixteen changes. pinned is an admin session that sends schema changes to the first
// host alone and does not wait after each.
var (
	pinnedOnce    sync.Once
	pinnedSession *gocql.Session
	pinnedErr     error
)

func pinned() (*gocql.Session, error) {
	pinnedOnce.Do(func() {
		c := cqlcluster.Admin(hosts...)
		c.HostFilter = gocql.WhiteListHostFilter(hosts[0])
		// The driver logs, and does not return, a wait it cut short; agree waits instead.
		c.MaxWaitSchemaAgreement = time.Nanosecond
		c.Logger = log.New(io.Discard, "", 0)
		pinnedSession, pinnedErr = c.CreateSession()
	})
	return pinnedSession, pinnedErr
}

var tableStatement = regexp.MustCompile(`(?i)^(CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS|ALTER\s+TABLE)\s+(\w+)`)

// makeSchemaKeyspace creates ks with shardq's schema through one node, under withDDL,
// then waits for every node to agree and every replica to serve each table. When that
// node cannot be reached (a fault test stopped it), it goes through admin one change at
// a time, as shardq.ApplySchema does.
func makeSchemaKeyspace(admin *gocql.Session, ks string) error {
	create, err := createKeyspaceStatement(ks)
	if err != nil {
		return err
	}
	p, err := pinned()
	if err == nil {
		err = withDDL(func(ctx context.Context) error {
			for _, stmt := range append([]string{create}, schemaStatements()...) {
				stmt = tableStatement.ReplaceAllString(stmt, "$1 "+ks+".$2")
				if err := p.Query(stmt).WithContext(ctx).RetryPolicy(lwt.NoRetry).Exec(); err != nil {
					return err
				}
			}
			return nil
		})
		if errors.Is(err, gocql.ErrNoConnections) {
			return makeKeyspaceOneChangeAtATime(admin, ks)
		}
	}
	if err != nil {
		return fmt.Errorf("creating keyspace %s with the schema: %w", ks, err)
	}
	return withDDL(func(ctx context.Context) error {
		// Before connecting: a session bound to ks connects to no node that lacks it.
		if err := admin.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("the nodes do not agree on keyspace %s: %w", ks, err)
		}
		s, err := connect(ks)
		if err != nil {
			return err
		}
		defer s.Close()
		return awaitTables(ctx, s)
	})
}

// makeKeyspaceOneChangeAtATime creates ks, then applies the schema through a session
// bound to it, each change agreed before the next.
func makeKeyspaceOneChangeAtATime(admin *gocql.Session, ks string) error {
	if err := createKeyspace(admin, ks); err != nil {
		return err
	}
	s, err := connect(ks)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := withDDL(func(ctx context.Context) error { return applySchema(ctx, s) }); err != nil {
		return fmt.Errorf("applying the schema to %s: %w", ks, err)
	}
	return nil
}
