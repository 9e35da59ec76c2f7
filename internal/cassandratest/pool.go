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
// keyspace it uses, touched when the keyspace is returned. A test binary with no rested
// keyspace takes over one a gone process of its host made with its schema and
// replication factor before it makes one (go test runs one binary per package, and a
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
}

// poolRest is how long a keyspace rests between tests.
const poolRest = 5 * time.Second

// inUse is the time of the lock file of a keyspace a test is using; otherwise its time
// is when it was last returned.
var inUse = time.Unix(0, 0)

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
	t.Cleanup(func() { giveBack(ks) })
	return ks
}

// giveBack returns keyspace ks to the pool once its test ended.
func giveBack(ks string) {
	now := time.Now()
	_ = os.Chtimes(lockPath(ks), now, now) // when it was returned, for a process that takes it over
	pool.Lock()
	pool.free = append(pool.free, pooled{ks, now})
	pool.Unlock()
}

// takeKeyspace empties a rested pooled keyspace and returns it, or one a gone process
// left, or makes a new one, marked in use.
func takeKeyspace(admin *gocql.Session) (string, error) {
	ks, err := takePooled(admin)
	if err == nil {
		// In use: a process that takes it over after this one died mid-test rests it from then.
		_ = os.Chtimes(lockPath(ks), inUse, inUse)
	}
	return ks, err
}

// takePooled is takeKeyspace's work, before the keyspace is marked in use.
func takePooled(admin *gocql.Session) (string, error) {
	pool.Lock()
	if !pool.swept {
		pool.swept = true
		sweepPools(admin)
	}
	for {
		var ks string
		if len(pool.free) > 0 && time.Since(pool.free[0].returned) >= poolRest {
			ks = pool.free[0].ks
			pool.free = pool.free[1:]
			pool.Unlock()
		} else {
			left, err := takeOver(admin)
			if left.ks == "" || err != nil {
				if err != nil {
					fmt.Fprintf(os.Stderr, "cassandratest: looking for keyspaces to take over: %v\n", err)
				}
				break
			}
			pool.Unlock()
			// It rests as a returned one does, which is worth the wait: making one takes
			// longer (about 20 s at RF 3).
			time.Sleep(poolRest - time.Since(left.returned))
			ks = left.ks
		}
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
	// A name already held is a leftover of a gone process with this PID that the sweep
	// could not drop; one held by another process, such a leftover it took over.
	var ks string
	for {
		pool.made++
		ks = fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), pool.made)
		if pool.held[ks] != nil {
			continue
		}
		held, err := holdKeyspace(ks)
		if err != nil {
			pool.Unlock()
			return "", err
		}
		if held {
			break
		}
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
// count follow. Worked out once: it reads schema.cql.
var adoptablePrefix = sync.OnceValues(func() (string, error) {
	rf, err := replicationFactor()
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.Join(schemaStatements(), ";")))
	return fmt.Sprintf("%s%08x_r%d_", poolPrefix(), h.Sum32(), rf), nil
})

// lockPath is the lock file of keyspace ks. It is named for the keyspace alone: processes
// may reach one cluster through different host lists.
func lockPath(ks string) string {
	return filepath.Join(os.TempDir(), "shardq-cassandratest-"+ks+".lock")
}

// holdKeyspace, with pool locked, takes ks's lock file for the rest of this process, and
// reports whether no other process held it.
func holdKeyspace(ks string) (bool, error) {
	if pool.held[ks] != nil {
		return true, nil
	}
	file, err := os.OpenFile(lockPath(ks), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, fmt.Errorf("opening the keyspace lock: %w", err)
	}
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		file.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("taking the keyspace lock %s: %w", lockPath(ks), err)
	}
	if pool.held == nil {
		pool.held = map[string]*os.File{}
	}
	pool.held[ks] = file
	return true, nil
}

// leftBy returns the pooled keyspaces of this host, each with the PID of the process that
// made it.
func leftBy(admin *gocql.Session) (map[string]int, error) {
	left := map[string]int{}
	iter := admin.Query(`SELECT keyspace_name FROM system_schema.keyspaces`).Iter()
	for name := ""; iter.Scan(&name); {
		if !strings.HasPrefix(name, poolPrefix()) {
			continue
		}
		fields := strings.Split(name, "_")
		if pid, err := strconv.Atoi(fields[len(fields)-2]); err == nil {
			left[name] = pid
		}
	}
	return left, iter.Close()
}

// takeOver, with pool locked, takes a keyspace a gone process of this host made with this
// process's schema and replication factor, if there is one, with when it was last
// returned.
func takeOver(admin *gocql.Session) (pooled, error) {
	adoptable, err := adoptablePrefix()
	if err != nil {
		return pooled{}, err
	}
	left, err := leftBy(admin)
	if err != nil {
		return pooled{}, err
	}
	for ks, pid := range left {
		if !strings.HasPrefix(ks, adoptable) || pid == os.Getpid() || pool.held[ks] != nil || alive(pid) {
			continue // not ours to take, or taken already (by this process, in use or pooled)
		}
		if held, err := holdKeyspace(ks); err != nil || !held {
			continue // another process took it over
		}
		returned := time.Now()
		if st, err := os.Stat(lockPath(ks)); err == nil && !st.ModTime().Equal(inUse) {
			returned = st.ModTime()
		}
		return pooled{ks, returned}, nil
	}
	return pooled{}, nil
}

// sweepPools, with pool locked, drops the pooled keyspaces of this host's gone processes
// that this process may not take over (made with another schema or replication factor,
// or by a gone process with this PID, whose names could clash with its own). Failures
// only leave them for the next sweep.
func sweepPools(admin *gocql.Session) {
	adoptable, err := adoptablePrefix()
	if err != nil {
		return
	}
	left, err := leftBy(admin)
	if err != nil {
		return
	}
	for ks, pid := range left {
		mine := pid == os.Getpid()
		if !mine && (alive(pid) || strings.HasPrefix(ks, adoptable)) {
			continue
		}
		if held, err := holdKeyspace(ks); err == nil && held {
			_ = dropKeyspace(admin, ks)
		}
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
