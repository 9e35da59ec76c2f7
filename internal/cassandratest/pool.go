package cassandratest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/shardq/shardq/internal/schema"
)

// Making a keyspace with shardq's schema takes ten schema changes (the keyspace, its
// tables, and dropping it after), each agreed by every node and costing each node CPU: at
// three nodes they took most of the suite's time. So SchemaKeyspace keeps them per test
// binary: a keyspace whose test ended rests for poolRest, is emptied with TRUNCATE and
// checked empty on every replica, and goes to the next test. (At RF 3, writes still under
// way on a loaded node when a test ended have been seen to land after a TRUNCATE.) Pooled
// keyspaces are named for the host and process that made them; a test binary drops those
// of processes of its host that are gone, so a node that keeps running between `go test`
// runs does not collect them.
var pool struct {
	sync.Mutex
	free  []pooled // oldest first
	made  int
	swept bool
}

type pooled struct {
	ks       string
	returned time.Time
}

// poolRest is how long a keyspace rests between tests.
const poolRest = 5 * time.Second

// SchemaKeyspace returns a keyspace with shardq's schema, empty, for this test alone. Its
// tables must stay as the schema makes them: a test that creates, drops or alters tables
// uses Keyspace.
func SchemaKeyspace(t testing.TB) string {
	t.Helper()
	admin := adminSession(t)
	ks, err := takeKeyspace(admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keyspace %s", ks)
	t.Cleanup(func() {
		pool.Lock()
		pool.free = append(pool.free, pooled{ks, time.Now()})
		pool.Unlock()
	})
	return ks
}

// takeKeyspace empties a rested pooled keyspace and returns it, or makes a new one.
func takeKeyspace(admin *gocql.Session) (string, error) {
	pool.Lock()
	if !pool.swept {
		pool.swept = true
		sweepPools(admin)
	}
	for len(pool.free) > 0 && time.Since(pool.free[0].returned) >= poolRest {
		ks := pool.free[0].ks
		pool.free = pool.free[1:]
		pool.Unlock()
		err := emptyKeyspace(admin, ks)
		if err == nil {
			return ks, nil
		}
		fmt.Fprintf(os.Stderr, "cassandratest: emptying pooled keyspace %s: %v; dropping it\n", ks, err)
		_ = dropKeyspace(admin, ks)
		pool.Lock()
	}
	pool.made++
	ks := fmt.Sprintf("%s%d_%d", poolPrefix(), os.Getpid(), pool.made)
	pool.Unlock()
	if err := createKeyspace(admin, ks); err != nil {
		return "", err
	}
	s, err := connect(ks)
	if err != nil {
		return "", err
	}
	defer s.Close()
	if err := withDDL(func(ctx context.Context) error { return applySchema(ctx, s) }); err != nil {
		return "", fmt.Errorf("applying the schema to %s: %w", ks, err)
	}
	return ks, nil
}

// leftRows names the tables of ks that hold a row.
func leftRows(admin *gocql.Session, ks string) ([]string, error) {
	var left []string
	for _, table := range schemaTables() {
		iter := admin.Query("SELECT * FROM " + ks + "." + table + " LIMIT 1").Consistency(gocql.All).Iter()
		rows := iter.NumRows()
		if err := iter.Close(); err != nil {
			return left, err
		}
		if rows > 0 {
			left = append(left, table)
		}
	}
	return left, nil
}

// emptyKeyspace truncates ks's tables, after checking they are the schema's, and checks
// that every replica has let go of every row; a second round is allowed.
func emptyKeyspace(admin *gocql.Session, ks string) error {
	var tables []string
	iter := admin.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, ks).Iter()
	for name := ""; iter.Scan(&name); {
		tables = append(tables, name)
	}
	if err := iter.Close(); err != nil {
		return err
	}
	slices.Sort(tables)
	if want := schemaTables(); !slices.Equal(tables, want) {
		return fmt.Errorf("its tables are %v, not the schema's %v", tables, want)
	}
	var left []string
	for range 2 {
		errs := make([]error, len(tables))
		var wg sync.WaitGroup
		for i, table := range tables {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = admin.Query("TRUNCATE " + ks + "." + table).Exec()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		var err error
		if left, err = leftRows(admin, ks); err != nil || len(left) == 0 {
			return err
		}
	}
	return fmt.Errorf("rows left in %v after TRUNCATE", left)
}

var createTable = regexp.MustCompile(`(?i)^\s*CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)`)

func schemaTables() []string {
	var names []string
	for _, stmt := range schemaStatements() {
		if m := createTable.FindStringSubmatch(stmt); m != nil {
			names = append(names, strings.ToLower(m[1]))
		}
	}
	slices.Sort(names)
	return names
}

// poolPrefix starts the names of this host's pooled keyspaces; the maker's PID follows.
func poolPrefix() string {
	host, _ := os.Hostname()
	h := fnv.New32a()
	_, _ = h.Write([]byte(host))
	return fmt.Sprintf("p_%08x_", h.Sum32())
}

// sweepPools drops the pooled keyspaces left by processes of this host that are gone.
// Failures only leave them for the next sweep.
func sweepPools(admin *gocql.Session) {
	var stale []string
	iter := admin.Query(`SELECT keyspace_name FROM system_schema.keyspaces`).Iter()
	for name := ""; iter.Scan(&name); {
		rest, ok := strings.CutPrefix(name, poolPrefix())
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "_")
		if pid, err := strconv.Atoi(pidText); err == nil && (pid == os.Getpid() || !alive(pid)) {
			stale = append(stale, name)
		}
	}
	if iter.Close() != nil {
		return
	}
	for _, ks := range stale {
		_ = dropKeyspace(admin, ks)
	}
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// dropKeyspace drops ks. A schema change waits for every node to agree, which on a
// loaded machine can take longer than one request's timeout; dropping again is harmless.
func dropKeyspace(admin *gocql.Session, ks string) error {
	var err error
	for range 3 {
		if err = exec(admin, "DROP KEYSPACE IF EXISTS "+ks); err == nil {
			return nil
		}
	}
	return err
}

// schemaStatements is schema.cql's statements, read from the checkout this package was
// built from: the root package embeds the file, but packages it imports use this helper
// in their tests, so it cannot import the root.
func schemaStatements() []string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("cassandratest: no caller information to find schema.cql by")
	}
	cql, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "schema.cql"))
	if err != nil {
		panic(fmt.Sprintf("cassandratest: reading schema.cql: %v", err))
	}
	return schema.Statements(string(cql))
}
