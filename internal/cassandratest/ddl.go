package cassandratest

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gocql/gocql"
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
