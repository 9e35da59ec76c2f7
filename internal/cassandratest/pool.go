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

// Making a keyspace with shardq's schema takes nine schema changes (the keyspace, its
// tables, and dropping it after), each agreed by every node and costing each node CPU: at
// three nodes they took most of the suite's time. So SchemaKeyspace keeps them: a
// keyspace whose test ended rests for poolRest, is emptied with TRUNCATE and checked
// empty on every replica, and goes to the next test. (At RF 3, writes still under way on
// a loaded node when a test ended have been seen to land after a TRUNCATE.) Pooled
// keyspaces are named for the host, the schema and replication factor they were made
// with, and the process that made them, and a process holds a lock file for each
// keyspace it uses. A test binary takes over those of its host's gone processes made
// with its schema and replication factor (go test runs one binary per package, and a
// later one reuses an earlier one's), and drops the others of gone processes, so a node
// that keeps running between `go test` runs does not collect them.
var pool struct {
	sync.Mutex
	free  []pooled // oldest first
	made  int
	swept bool
	held  map[string]*os.File // the lock files of the keyspaces this process took, open for its life
}

type pooled struct {
	ks       string
	returned time.Time
	adopted  bool // taken over from a gone process
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
		pool.free = append(pool.free, pooled{ks: ks, returned: time.Now()})
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
	for len(pool.free) > 0 {
		// A keyspace taken over rests too, and is worth the wait: making one takes longer
		// (about 20 s at RF 3).
		if rest := poolRest - time.Since(pool.free[0].returned); rest > 0 {
			if !pool.free[0].adopted {
				break
			}
			pool.Unlock()
			time.Sleep(rest)
			pool.Lock()
			continue
		}
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
	prefix, err := adoptablePrefix()
	if err != nil {
		pool.Unlock()
		return "", err
	}
	// A name whose lock is held is a keyspace that a gone process with this PID made and
	// another process took over.
	var ks string
	for ks == "" || !holdKeyspace(ks) {
		pool.made++
		ks = fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), pool.made)
	}
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

// poolPrefix starts the names of this host's pooled keyspaces.
func poolPrefix() string {
	host, _ := os.Hostname()
	h := fnv.New32a()
	_, _ = h.Write([]byte(host))
	return fmt.Sprintf("p_%08x_", h.Sum32())
}

// adoptablePrefix starts the names of this host's pooled keyspaces that this process may
// use: made with the same schema.cql and replication factor. The maker's PID and its
// count follow.
func adoptablePrefix() (string, error) {
	rf, err := replicationFactor()
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.Join(schemaStatements(), ";")))
	return fmt.Sprintf("%s%08x_r%d_", poolPrefix(), h.Sum32(), rf), nil
}

// holdKeyspace, with pool locked, takes ks's lock file for the rest of this process, and
// reports whether no other process held it.
func holdKeyspace(ks string) bool {
	if pool.held[ks] != nil {
		return true
	}
	// Named for the keyspace alone: processes may reach one cluster through different
	// host lists.
	path := filepath.Join(os.TempDir(), "shardq-cassandratest-"+ks+".lock")
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		file.Close()
		return false
	}
	if pool.held == nil {
		pool.held = map[string]*os.File{}
	}
	pool.held[ks] = file
	return true
}

// sweepPools, with pool locked, takes over the pooled keyspaces of this host's gone
// processes that this process may use, and drops the others of gone processes. Failures
// only leave them for the next sweep.
func sweepPools(admin *gocql.Session) {
	adoptable, err := adoptablePrefix()
	if err != nil {
		return
	}
	var stale []string
	iter := admin.Query(`SELECT keyspace_name FROM system_schema.keyspaces`).Iter()
	for name := ""; iter.Scan(&name); {
		if !strings.HasPrefix(name, poolPrefix()) {
			continue
		}
		fields := strings.Split(name, "_")
		pid, err := strconv.Atoi(fields[len(fields)-2])
		mine := pid == os.Getpid() // left by a gone process with this PID: its name could clash
		if err != nil || !mine && alive(pid) || !holdKeyspace(name) {
			continue // its maker runs, or another process took it over
		}
		if !mine && strings.HasPrefix(name, adoptable) {
			// Its last test may have ended just now: it rests as a returned one does.
			pool.free = append(pool.free, pooled{name, time.Now(), true})
		} else {
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

// alive reports whether a process with this PID runs.
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
