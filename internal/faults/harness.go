//go:build faults

package faults

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// The environment through which a test hands its worker processes their queue.
const (
	keyspaceEnv = "SHARDQ_FAULTS_KEYSPACE"
	queueEnv    = "SHARDQ_FAULTS_QUEUE"
	// jsonEnv names a file each test appends its figures to, as one JSON line.
	jsonEnv = "SHARDQ_FAULTS_JSON"
)

// handlerWork is how long each handler works on a task, so that killed workers die with
// tasks in their hands.
const handlerWork = 10 * time.Millisecond

// WorkerProcess is the worker process of the fault tests, which each test binary runs
// as its TestWorkerProcess: a default worker (16 handlers) on a's session, on the queue
// its parent names. It says "ready" once it has polled, then
// "started <task> <due ns> <start ns> <attempt> <lease deadline ns>" as each handler
// starts, "done <task>" as a handler returns nil (before the task is acked), "acked <task>"
// for each task of an Acked event, "lost <task>" for each LeaseLost event and "failed <op>" for each PartitionFailed event; the worker's
// warnings go to standard error. It stops when its standard input closes. Run without its
// parent's environment it has nothing to do and returns.
func WorkerProcess(t *testing.T, a Adapter) {
	ks := os.Getenv(keyspaceEnv)
	if ks == "" {
		return
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		// Unbuffered: a line written is out of the process even if it is killed next.
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	w, err := worker.New(a.Connect(t, ks), worker.Config{
		Queue:       os.Getenv(queueEnv),
		Concurrency: 16,
		Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			say("started %s %d %d %d %d", task.ID, task.DueAt.UnixNano(), time.Now().UnixNano(), task.Attempt, task.Deadline.UnixNano())
			select {
			case <-time.After(handlerWork):
				say("done %s", task.ID)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
		Observer: shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) {
			switch e := e.(type) {
			case shardqtype.PartitionFailed:
				say("failed %s", e.Op)
			case shardqtype.LeaseLost:
				say("lost %s", e.TaskID)
			case shardqtype.Acked:
				for _, id := range e.TaskIDs {
					say("acked %s", id)
				}
			}
		}),
		// Why a task ran twice shows here: an ack that failed, or settled late; and whose
		// markers a task had, for a swap this process may not live to make.
		Logger: slog.New(markerLines{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), say: say}),
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	for w.Stats().Polls == 0 { // the first poll's end is not an event; it comes within ms
		time.Sleep(5 * time.Millisecond)
	}
	say("ready")
	<-stop
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx))
}

// markerLines writes a "markers" line per task of the consumer's "writing markers" debug
// records, and passes records at Warn and above to next.
type markerLines struct {
	next slog.Handler
	say  func(format string, args ...any)
}

func (h markerLines) Enabled(context.Context, slog.Level) bool { return true }

func (h markerLines) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "writing markers" {
		r.Attrs(func(a slog.Attr) bool {
			if ids, ok := a.Value.Any().([]string); ok && a.Key == "task_ids" {
				for _, id := range ids {
					h.say("markers %s", id)
				}
			}
			return true
		})
		return nil
	}
	if r.Level < slog.LevelWarn {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h markerLines) WithAttrs(as []slog.Attr) slog.Handler {
	return markerLines{next: h.next.WithAttrs(as), say: h.say}
}

func (h markerLines) WithGroup(name string) slog.Handler {
	return markerLines{next: h.next.WithGroup(name), say: h.say}
}

// cluster drives the nodes that scripts/cassandra started.
type cluster struct {
	t      *testing.T
	script string
	hosts  []string // node i's address is hosts[i-1]
}

// newCluster checks that the three nodes of scripts/cassandra run, that the tests talk to
// them, and that test keyspaces replicate to all three; any of these missing fails the test.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok, "the harness's own path, to find scripts/cassandra")
	c := &cluster{t: t, script: filepath.Join(filepath.Dir(file), "..", "..", "scripts", "cassandra")}
	c.hosts = strings.Split(c.run("hosts"), ",")
	require.Len(t, c.hosts, 3, "the fault tests need three nodes: make test-cluster")
	require.ElementsMatch(t, c.hosts, cassandratest.Hosts(t),
		"%s must name the nodes of scripts/cassandra: make test-cluster", cqlcluster.HostsEnv)
	require.Equal(t, "3", os.Getenv(cassandratest.RFEnv), "the fault tests need %s=3: make test-cluster", cassandratest.RFEnv)
	for i := range c.hosts {
		c.pid(i + 1)
	}
	return c
}

// run runs scripts/cassandra with args and returns its standard output, trimmed.
func (c *cluster) run(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.script, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(c.t, err, "scripts/cassandra %s: %s%s", strings.Join(args, " "), out, stderr.String())
	return strings.TrimSpace(string(out))
}

func (c *cluster) pid(node int) int {
	c.t.Helper()
	pid, err := strconv.Atoi(c.run("pid", strconv.Itoa(node)))
	require.NoError(c.t, err)
	return pid
}

// signal sends sig to node's process. A SIGSTOP returns once every thread of it has
// stopped: kill returns before they all have, and a thread still running answered a read
// sent right after it in 3 ms.
func (c *cluster) signal(node int, sig syscall.Signal) {
	c.t.Helper()
	pid := c.pid(node)
	require.NoError(c.t, syscall.Kill(pid, sig))
	if sig == syscall.SIGSTOP {
		for deadline := time.Now().Add(5 * time.Second); !stopped(pid); {
			require.True(c.t, time.Now().Before(deadline), "node %d's threads did not all stop within 5 s", node)
			time.Sleep(time.Millisecond)
		}
	}
	c.t.Logf("node %d (%s): %v", node, c.hosts[node-1], sig)
}

// stopped reports whether every thread of process pid is stopped (state T in its stat).
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, task := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // a thread that ended
		}
		stat := string(raw)
		if i := strings.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}

// kill kills node at once, for good: it stays down until restart.
func (c *cluster) kill(node int) {
	c.t.Helper()
	pid := c.pid(node)
	require.NoError(c.t, syscall.Kill(pid, syscall.SIGKILL))
	c.t.Logf("node %d (%s): SIGKILL", node, c.hosts[node-1])
}

// restart starts node again with its data, stopping it first if it runs, and returns
// once every node sees every other.
func (c *cluster) restart(node int) {
	c.t.Helper()
	t0 := time.Now()
	c.run("restart", strconv.Itoa(node))
	c.t.Logf("node %d (%s) restarted with its data in %v", node, c.hosts[node-1], time.Since(t0).Round(100*time.Millisecond))
}

// stop stops node (its data stays) and returns once it has exited.
func (c *cluster) stop(node int) {
	c.t.Helper()
	c.run("stop", strconv.Itoa(node))
	c.t.Logf("node %d (%s) stopped", node, c.hosts[node-1])
}

func (c *cluster) nodetool(node int, args ...string) {
	c.t.Helper()
	c.run(append([]string{"nodetool", strconv.Itoa(node)}, args...)...)
}

// restoreAtEnd makes sure node runs and answers when the test ends, so the next test
// finds three nodes.
func (c *cluster) restoreAtEnd(node int) {
	c.t.Cleanup(func() {
		cmd := exec.Command(c.script, "pid", strconv.Itoa(node))
		if out, err := cmd.Output(); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				return
			}
		}
		c.restart(node)
	})
}

// env is one test's keyspace, queue, producer, recorder and worker processes.
type env struct {
	t  *testing.T
	a  Adapter
	ks string
	// session reads and changes the keyspace for the test's own checks, on v1 whatever
	// the adapter under test.
	session *gocql.Session
	d       *shardq.Driver // the adapter's, for the producer, the queue and inspect
	q       shardqtype.QueueConfig
	p       *producer.Producer
	rec     *recorder

	mu      sync.Mutex
	workers []*proc
	procs   int // worker processes started
}

func newEnv(t *testing.T, a Adapter, q shardqtype.QueueConfig) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, a: a, ks: keyspace(t), rec: newRecorder()}
	e.session = cassandratest.SessionFor(t, e.ks, func(c *gocql.ClusterConfig) { c.Timeout = shardqgocql.RecommendedTimeout })
	cassandratest.ApplySchema(t, e.session)
	e.d = a.Connect(t, e.ks)
	q.Name = "faults"
	var err error
	e.q, err = shardq.CreateQueue(ctx, e.d, q)
	require.NoError(t, err)
	e.p, err = producer.New(e.d, producer.Config{})
	require.NoError(t, err)
	t.Cleanup(e.stopWorkers)
	return e
}

// keyspace creates a keyspace replicated to all three nodes for this test. It is not
// dropped afterwards: Cassandra 5.0.9 can fail a drop on a node that was restarted moments
// before and is still replaying hints (IllegalArgumentException "Unknown CF" in
// forceRecycleAll), leaving that node's schema behind for good, and the cluster is thrown
// away after the run anyway.
func keyspace(t *testing.T) string {
	t.Helper()
	admin, err := cqlcluster.Admin(cassandratest.Hosts(t)...).CreateSession()
	require.NoError(t, err)
	defer admin.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(strings.TrimPrefix(t.Name(), "Test")) + "_" + hex.EncodeToString(b[:])
	require.NoError(t, admin.Query(`CREATE KEYSPACE `+name+
		` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': `+os.Getenv(cassandratest.RFEnv)+`}`).Exec())
	return name
}

// schedule schedules n tasks due evenly over span from start, and returns their IDs and
// when the last is due.
func (e *env) schedule(n int, start time.Time, span time.Duration) ([]uuid.UUID, time.Time) {
	e.t.Helper()
	const batch = 500
	step := span / time.Duration(n)
	var all []uuid.UUID
	for i := 0; i < n; i += batch {
		tasks := make([]producer.Task, min(batch, n-i))
		due := make([]time.Time, len(tasks))
		for j := range tasks {
			due[j] = start.Add(time.Duration(i+j) * step)
			tasks[j] = producer.Task{Queue: e.q.Name, DueAt: due[j]}
		}
		ids, err := e.p.ScheduleTasks(context.Background(), tasks)
		require.NoError(e.t, err)
		e.rec.scheduled(ids, due)
		all = append(all, ids...)
	}
	return all, start.Add(time.Duration(n-1) * step)
}

// asDueLead is how long before its first task comes due scheduleAsDue writes a batch: a
// write held up by the fault (a frozen node's timeout, a retry) still lands before then.
const asDueLead = 5 * time.Second

// scheduleAsDue schedules n tasks due evenly over span from start, as schedule does, but
// from a goroutine that writes a second of them at a time asDueLead before they come due,
// so that the producer writes through the fault, as a service's would. It returns when the
// last is due, and a wait for the writes to end that returns the IDs written.
func (e *env) scheduleAsDue(n int, start time.Time, span time.Duration) (time.Time, func() []uuid.UUID) {
	step := span / time.Duration(n)
	batch := max(1, int(time.Second/step))
	stop, ended := make(chan struct{}), make(chan []uuid.UUID, 1)
	go func() {
		var all []uuid.UUID
		defer func() { ended <- all }()
		for i := 0; i < n; i += batch {
			due := make([]time.Time, min(batch, n-i))
			for j := range due {
				due[j] = start.Add(time.Duration(i+j) * step)
			}
			select {
			case <-time.After(time.Until(due[0].Add(-asDueLead))): // the producer's own pace
			case <-stop:
				return
			}
			ids, err := e.write(due)
			if err != nil {
				e.t.Errorf("scheduling tasks due from %s: %v", due[0].Format(time.StampMilli), err)
				return
			}
			all = append(all, ids...)
		}
	}()
	var once sync.Once
	var ids []uuid.UUID
	wait := func() []uuid.UUID {
		once.Do(func() { ids = <-ended })
		return ids
	}
	e.t.Cleanup(func() {
		close(stop)
		wait()
	})
	return start.Add(time.Duration(n-1) * step), wait
}

// write schedules a task due at each of due, as a service would through a fault: the
// tasks whose write was not confirmed (producer.PartialError) are written again under new
// IDs, up to five times, and a call that failed before writing is made again. The first
// copies of tasks written again are recorded as maybe written: they may run, never early,
// and need not. It returns the IDs confirmed.
func (e *env) write(due []time.Time) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(due))
	todo := make([]int, len(due))
	for i := range todo {
		todo[i] = i
	}
	for try := 1; ; try++ {
		tasks := make([]producer.Task, len(todo))
		for j, i := range todo {
			tasks[j] = producer.Task{Queue: e.q.Name, DueAt: due[i]}
		}
		got, err := e.p.ScheduleTasks(context.Background(), tasks)
		var partial *producer.PartialError
		switch {
		case err != nil && try == 5:
			return nil, err
		case err != nil && !errors.As(err, &partial):
			continue // nothing was written
		}
		failed := map[int]bool{}
		if partial != nil {
			for _, f := range partial.Failed {
				failed[f] = true
			}
		}
		var again []int
		for j, i := range todo {
			if failed[j] {
				e.rec.maybeScheduled(got[j], due[i])
				again = append(again, i)
				continue
			}
			ids[i] = got[j]
			e.rec.scheduled(got[j:j+1], due[i:i+1])
		}
		if len(again) == 0 {
			return ids, nil
		}
		todo = again
	}
}

// waitStarted returns once n scheduled tasks have started, or fails the test after
// within, saying where the first that have not are.
func (e *env) waitStarted(n int, within time.Duration) {
	e.t.Helper()
	e.wait(n, false, within)
}

// waitDone returns once a handler has finished each of n scheduled tasks, or fails the
// test after within, saying where the first that have not are.
func (e *env) waitDone(n int, within time.Duration) {
	e.t.Helper()
	e.wait(n, true, within)
}

func (e *env) wait(n int, done bool, within time.Duration) {
	e.t.Helper()
	reached, missing := e.rec.wait(n, done, within)
	if missing == nil {
		return
	}
	in, err := inspect.New(e.d, inspect.Config{})
	require.NoError(e.t, err)
	for _, id := range missing {
		info, err := in.Task(context.Background(), id)
		if err != nil {
			e.t.Logf("task %s: %v", id, err)
			continue
		}
		e.t.Logf("task %s: %s, due %s, attempt %d, lease until %s", id, info.State,
			info.DueAt.Format(time.StampMilli), info.Attempt, info.Deadline.Format(time.StampMilli))
	}
	what := map[bool]string{false: "started", true: "finished"}[done]
	require.FailNow(e.t, "tasks not "+what+" in time", "%d of %d %s within %v (keyspace %s)", reached, n, what, within, e.ks)
}

// settle returns once a handler has finished every scheduled task and every one was
// acked: no row of tasks ids (of any task when ids is nil) is left in the queue (read at
// QUORUM) and none was dead-lettered. It fails the test if that takes longer than within.
func (e *env) settle(within time.Duration, ids []uuid.UUID) {
	e.t.Helper()
	e.waitDone(len(e.rec.want), within)
	e.waitDrained(within, ids)
	in, err := inspect.New(e.d, inspect.Config{})
	require.NoError(e.t, err)
	letters, err := in.DeadLetters(context.Background(), e.q.Name, inspect.DeadLetterQuery{Limit: 10})
	require.NoError(e.t, err)
	require.Empty(e.t, letters, "dead-lettered tasks")
}

// waitDrained returns when no row of tasks ids is left in the queue (read at QUORUM), no
// task row at all when ids is nil, or fails the test after within.
func (e *env) waitDrained(within time.Duration, ids []uuid.UUID) time.Time {
	e.t.Helper()
	of := map[gocql.UUID]bool{}
	for _, id := range ids {
		of[gocql.UUID(id)] = true
	}
	deadline := time.Now().Add(within)
	for {
		iter := e.session.Query(`SELECT task_id FROM tasks WHERE kind = 1 ALLOW FILTERING`).Iter()
		n := 0
		for id := (gocql.UUID{}); iter.Scan(&id); {
			if ids == nil || of[id] {
				n++
			}
		}
		err := iter.Close()
		if err == nil && n == 0 {
			return time.Now()
		}
		require.True(e.t, time.Now().Before(deadline), "task rows left after %v: %d (%v)", within, n, err)
		time.Sleep(200 * time.Millisecond) // polling the table; nothing signals its draining
	}
}

// proc is one worker process.
type proc struct {
	n      int // numbered from 1 in start order
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{} // closed once its output is read and it was waited for
	err    error
}

// startWorker starts a worker process and returns once it has polled the queue.
func (e *env) startWorker() *proc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), keyspaceEnv+"="+e.ks, queueEnv+"="+e.q.Name,
		cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(e.t), ","))
	stdin, err := cmd.StdinPipe()
	require.NoError(e.t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(e.t, err)
	cmd.Stderr = os.Stderr
	require.NoError(e.t, cmd.Start())
	e.mu.Lock()
	e.procs++
	p := &proc{n: e.procs, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	e.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); line == "ready" {
				close(ready)
			} else {
				e.rec.line(p.n, line)
			}
		}
		p.err = cmd.Wait()
	}()
	select {
	case <-ready:
	case <-p.exited:
		require.FailNow(e.t, "a worker process ended before it was ready", "%v", p.err)
	case <-time.After(time.Minute):
		require.FailNow(e.t, "a worker process was not ready within a minute")
	}
	e.mu.Lock()
	e.workers = append(e.workers, p)
	e.mu.Unlock()
	return p
}

// anyWorker returns one of the running worker processes, picked at random.
func (e *env) anyWorker() *proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NotEmpty(e.t, e.workers)
	return e.workers[mrand.IntN(len(e.workers))]
}

// killWorker kills worker process p at once, and returns once it is gone.
func (e *env) killWorker(p *proc) {
	e.t.Helper()
	e.rec.killedProc(p.n)
	require.NoError(e.t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
	e.t.Logf("worker %d killed", p.n)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.workers = slices.DeleteFunc(e.workers, func(q *proc) bool { return q == p })
}

// stopWorkers stops every worker process the way a deployment would (the worker's Stop),
// and fails the test if one does not exit cleanly within a minute.
func (e *env) stopWorkers() {
	e.mu.Lock()
	workers := e.workers
	e.workers = nil
	e.mu.Unlock()
	for _, p := range workers {
		_ = p.stdin.Close()
	}
	for _, p := range workers {
		select {
		case <-p.exited:
			if p.err != nil {
				e.t.Errorf("worker process: %v", p.err)
			}
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			e.t.Errorf("a worker process did not stop within a minute")
		}
	}
}

// delivery is one handler start.
type delivery struct {
	due, start time.Time
	deadline   time.Time // of the lease it ran under
	attempt    int
	proc       int  // the worker process that ran it
	done       bool // its handler returned nil
	acked      bool // its worker acked it
}

// recorder gathers what the worker processes report.
type recorder struct {
	mu     sync.Mutex
	want   map[uuid.UUID]time.Time // scheduled tasks and when each is due
	maybe  map[uuid.UUID]time.Time // tasks whose write was not confirmed (see env.write)
	runs   map[uuid.UUID][]delivery
	killed map[int]time.Time // worker processes killed, and when
	// markers holds, per task, the worker processes that were about to write markers for
	// it (a "markers" line).
	markers map[uuid.UUID][]int
	lost    int                // LeaseLost events
	lostOf  map[uuid.UUID]bool // tasks a LeaseLost event named
	failed  map[string]int     // PartitionFailed events by op
	bad     []string           // lines that made no sense
	// waiters are told when the number of scheduled tasks that started, or whose handler
	// returned nil, reaches theirs.
	waiters map[*waiter]bool
	started int // scheduled tasks started at least once
	done    int // scheduled tasks whose handler returned nil at least once
}

type waiter struct {
	n    int
	done bool // counts done tasks, not started ones
	ch   chan struct{}
}

func newRecorder() *recorder {
	return &recorder{want: map[uuid.UUID]time.Time{}, maybe: map[uuid.UUID]time.Time{}, runs: map[uuid.UUID][]delivery{},
		killed: map[int]time.Time{}, markers: map[uuid.UUID][]int{},
		lostOf: map[uuid.UUID]bool{},
		failed: map[string]int{}, waiters: map[*waiter]bool{}}
}

func (r *recorder) scheduled(ids []uuid.UUID, due []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, id := range ids {
		r.want[id] = due[i]
		if runs := r.runs[id]; len(runs) > 0 { // started before its ID came back to us
			r.started++
			if slices.ContainsFunc(runs, func(d delivery) bool { return d.done }) {
				r.done++
			}
		}
	}
	r.notify()
}

// maybeScheduled notes a task whose write was not confirmed: it may run, or not.
func (r *recorder) maybeScheduled(id uuid.UUID, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maybe[id] = due
}

// killedProc notes that worker process proc was killed.
func (r *recorder) killedProc(proc int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed[proc] = time.Now()
}

// line notes a line that worker process proc wrote.
func (r *recorder) line(proc int, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "failed":
		r.failed[f[1]]++
	case len(f) == 2 && f[0] == "lost":
		r.lost++
		if id, err := uuid.Parse(f[1]); err == nil {
			r.lostOf[id] = true
		}
	case len(f) == 2 && f[0] == "markers":
		if id, err := uuid.Parse(f[1]); err == nil {
			r.markers[id] = append(r.markers[id], proc)
		} else {
			r.bad = append(r.bad, line)
		}
	case len(f) == 2 && f[0] == "done":
		r.finished(proc, line, f[1])
	case len(f) == 2 && f[0] == "acked":
		if d := r.lastRun(proc, f[1]); d != nil {
			d.acked = true
		} else {
			r.bad = append(r.bad, line)
		}
	case len(f) == 6 && f[0] == "started":
		r.start(proc, line, f[1:])
	case line != "PASS" && !strings.HasPrefix(line, "ok "):
		r.bad = append(r.bad, line)
	}
}

// start notes a handler start. The caller holds r.mu.
func (r *recorder) start(proc int, line string, f []string) {
	id, err1 := uuid.Parse(f[0])
	due, err2 := strconv.ParseInt(f[1], 10, 64)
	start, err3 := strconv.ParseInt(f[2], 10, 64)
	attempt, err4 := strconv.Atoi(f[3])
	deadline, err5 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		r.bad = append(r.bad, line)
		return
	}
	r.runs[id] = append(r.runs[id], delivery{due: time.Unix(0, due), start: time.Unix(0, start),
		deadline: time.Unix(0, deadline), attempt: attempt, proc: proc})
	if _, ok := r.want[id]; ok && len(r.runs[id]) == 1 {
		r.started++
		r.notify()
	}
}

// finished notes that a handler of proc returned nil: its latest start there. The caller
// holds r.mu.
func (r *recorder) finished(proc int, line, task string) {
	d := r.lastRun(proc, task)
	if d == nil {
		r.bad = append(r.bad, line)
		return
	}
	id := uuid.MustParse(task)
	first := !slices.ContainsFunc(r.runs[id], func(d delivery) bool { return d.done })
	d.done = true
	if _, ok := r.want[id]; ok && first {
		r.done++
		r.notify()
	}
}

// lastRun returns the latest run of task in worker process proc, or nil. The caller holds
// r.mu.
func (r *recorder) lastRun(proc int, task string) *delivery {
	id, err := uuid.Parse(task)
	if err != nil {
		return nil
	}
	runs := r.runs[id]
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].proc == proc {
			return &runs[i]
		}
	}
	return nil
}

// notify tells the waiters whose count was reached. The caller holds r.mu.
func (r *recorder) notify() {
	for w := range r.waiters {
		if (!w.done && r.started >= w.n) || (w.done && r.done >= w.n) {
			close(w.ch)
			delete(r.waiters, w)
		}
	}
}

// wait returns once n scheduled tasks have started (or, with done, finished a run), or
// after within with up to ten of those that have not.
func (r *recorder) wait(n int, done bool, within time.Duration) (reached int, missing []uuid.UUID) {
	w := &waiter{n: n, done: done, ch: make(chan struct{})}
	r.mu.Lock()
	r.waiters[w] = true
	r.notify()
	r.mu.Unlock()
	select {
	case <-w.ch:
		return n, nil
	case <-time.After(within):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiters, w)
	for id := range r.want {
		runs := r.runs[id]
		if (len(runs) == 0 || done && !slices.ContainsFunc(runs, func(d delivery) bool { return d.done })) && len(missing) < 10 {
			missing = append(missing, id)
		}
	}
	if done {
		return r.done, missing
	}
	return r.started, missing
}

// startedAfter counts the starts of tasks ids after at, by attempt.
func (r *recorder) startedAfter(ids []uuid.UUID, at time.Time) map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]int{}
	for _, id := range ids {
		for _, d := range r.runs[id] {
			if d.start.After(at) {
				out[d.attempt]++
			}
		}
	}
	return out
}

// dueWithin counts the scheduled tasks due within [from, to].
func (r *recorder) dueWithin(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, due := range r.want {
		if !due.Before(from) && !due.After(to) {
			n++
		}
	}
	return n
}

// report is one fault test's figures.
type report struct {
	Fault string `json:"fault"`
	// Adapter names the driver adapter the producer, the queue and the workers ran on.
	Adapter string `json:"adapter"`
	Tasks   int    `json:"tasks"`
	// Lost counts tasks no handler finished; that every task was acked as well is
	// env.waitDrained's to show.
	Lost int `json:"lost"`
	// Duplicates counts starts after a task's first; Unfinished those that came from the
	// markers of a killed worker's swap that never finished (see unfinishedSwap); Unexplained those
	// neither such nor after a run in a worker process killed before they started or
	// killed without having acked it.
	Duplicates  int `json:"duplicates"`
	Unfinished  int `json:"unfinished_swap_duplicates"`
	Unexplained int `json:"unexplained_duplicates"`
	// Early counts runs, of any attempt, that started before their task was due, among
	// the tasks scheduled and those maybe written.
	Early int `json:"early"`
	// MaybeWritten counts the tasks whose write was not confirmed and that were written
	// again (env.write), and MaybeRan those of them that ran.
	MaybeWritten int `json:"maybe_written"`
	MaybeRan     int `json:"maybe_ran"`
	// Redelivered counts tasks started at an attempt past the first: delivered again
	// after a lease that ran out.
	Redelivered int            `json:"redelivered"`
	LeaseLost   int            `json:"lease_lost"`
	P50         float64        `json:"lateness_p50_ms"`
	P99         float64        `json:"lateness_p99_ms"`
	Max         float64        `json:"lateness_max_ms"`
	Failed      map[string]int `json:"partition_failures"`
	Extra       map[string]any `json:"extra,omitempty"`
	// twice describes the runs of up to ten tasks with unexplained duplicates, and of up
	// to ten with duplicates from unfinished swaps.
	twice []string
}

// report is the recorder's report, naming the adapter.
func (e *env) report(fault string) report {
	rep := e.rec.report(fault)
	rep.Adapter = e.a.Name
	return rep
}

// report counts lost, duplicated and redelivered tasks, and the lateness of each task's
// first start.
func (r *recorder) report(fault string) report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{Fault: fault, Tasks: len(r.want), LeaseLost: r.lost, Failed: map[string]int{}, Extra: map[string]any{}}
	var late []time.Duration
	for id := range r.want {
		runs := r.runs[id]
		if !slices.ContainsFunc(runs, func(d delivery) bool { return d.done }) {
			rep.Lost++
		}
		if len(runs) == 0 {
			continue
		}
		rep.Duplicates += len(runs) - 1
		runs = slices.Clone(runs)
		slices.SortStableFunc(runs, func(a, b delivery) int { return a.start.Compare(b.start) })
		unexplained, unfinished := 0, 0
		for i := 1; i < len(runs); i++ {
			switch killedAt, killed := r.killed[runs[i-1].proc]; {
			case killed && killedAt.Before(runs[i].start):
			case killed && !runs[i-1].acked:
				// Its ack was still batching or in flight (a slow LWT on loaded nodes)
				// when the lease ran out, and the worker died before it landed.
			case r.unfinishedSwap(id, runs[i-1], runs[i]):
				unfinished++
			default:
				unexplained++
			}
		}
		for _, c := range []struct {
			n, seen int
			what    string
		}{{unexplained, rep.Unexplained, "ran twice"}, {unfinished, rep.Unfinished, "ran twice after an unfinished swap"}} {
			if c.n == 0 || c.seen >= 10 {
				continue
			}
			desc := c.what + ": " + id.String() + ":"
			for _, d := range runs {
				desc += fmt.Sprintf(" [worker %d, attempt %d, due %s, started %s, lease until %s, done %t]", d.proc, d.attempt,
					d.due.Format(time.StampMilli), d.start.Format(time.StampMilli), d.deadline.Format(time.StampMilli), d.done)
			}
			rep.twice = append(rep.twice, desc)
		}
		rep.Unexplained += unexplained
		rep.Unfinished += unfinished
		if slices.ContainsFunc(runs, func(d delivery) bool { return d.attempt > 1 }) {
			rep.Redelivered++
		}
		late = append(late, runs[0].start.Sub(runs[0].due))
	}
	rep.P50, rep.P99, rep.Max = percentiles(late)
	for op, n := range r.failed {
		rep.Failed[op] = n
	}
	if len(r.bad) > 0 {
		rep.Extra["unexpected_lines"] = len(r.bad)
	}
	unknown, unmarked := 0, 0
	for id, runs := range r.runs {
		for _, d := range runs {
			if !slices.Contains(r.markers[id], d.proc) {
				unmarked++
			}
		}
		// The worker reports the due time as stored (whole milliseconds), which a row's
		// visible time, kept to 100 ns, equals.
		for _, d := range runs {
			if d.start.Before(d.due) {
				rep.Early++
			}
		}
		_, wanted := r.want[id]
		_, maybe := r.maybe[id]
		switch {
		case maybe:
			rep.MaybeRan++
		case !wanted:
			unknown++
		}
	}
	rep.MaybeWritten = len(r.maybe)
	if unknown > 0 {
		rep.Extra["unknown_tasks"] = unknown
	}
	// Every lease writes markers first: a run with no "markers" line before it means those
	// lines, which unfinishedSwap relies on, are not coming through.
	if unmarked > 0 {
		rep.Extra["runs_without_markers_line"] = unmarked
	}
	return rep
}

// unfinishedSwap reports whether cur, the run of task id after prev, can have come from
// a timeout marker a killed worker wrote for a swap it did not live to make: a crash
// between the two writes of a lease delivers the task once more at the marker's deadline
// (docs/design.md, The protocol). Such a marker leases the same attempt as the one a live worker
// took the task under next, so the two runs' leases overlap, their attempts are adjacent,
// and the live one's ack still finds its own marker (no LeaseLost names the task); and
// the worker killed before cur started is one that was writing markers for this very task
// (its "markers" line). A run that took a lease still held would have made the holder's
// ack fail. The caller holds r.mu.
func (r *recorder) unfinishedSwap(id uuid.UUID, prev, cur delivery) bool {
	if !cur.start.Before(prev.deadline) || (cur.attempt-prev.attempt != 1 && prev.attempt-cur.attempt != 1) || r.lostOf[id] {
		return false
	}
	for _, proc := range r.markers[id] {
		if at, ok := r.killed[proc]; ok && at.After(cur.due) && at.Before(cur.start) {
			return true
		}
	}
	return false
}

// lateness returns p50, p99 and max of the lateness of the first start of the tasks due
// within [from, to], and how many there are.
func (r *recorder) lateness(from, to time.Time) (p50, p99, maxMs float64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var late []time.Duration
	for id := range r.want {
		if runs := r.runs[id]; len(runs) > 0 && !runs[0].due.Before(from) && !runs[0].due.After(to) {
			late = append(late, runs[0].start.Sub(runs[0].due))
		}
	}
	p50, p99, maxMs = percentiles(late)
	return p50, p99, maxMs, len(late)
}

// percentiles returns p50, p99 and max of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99, maxMs float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) float64 { return ms(s[int(p*float64(len(s)-1))]) }
	return at(0.5), at(0.99), ms(s[len(s)-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// finish logs rep, appends it to the file jsonEnv names, and fails the test if a task was
// lost, ran before it was due, ran twice though no worker that ran it (or left a swap
// unfinished) was killed, or a worker said something unexpected.
func finish(t *testing.T, rep report) {
	t.Helper()
	line, err := json.Marshal(rep)
	require.NoError(t, err)
	t.Logf("%s", line)
	if path := os.Getenv(jsonEnv); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = fmt.Fprintln(f, string(line))
		require.NoError(t, errors.Join(err, f.Close()))
	}
	for _, desc := range rep.twice {
		t.Logf("%s", desc)
	}
	require.Zero(t, rep.Lost, "tasks no handler finished")
	require.Zero(t, rep.Early, "runs started before their task was due")
	require.Zero(t, rep.Unexplained, "tasks started again though no worker that ran them, or left a swap unfinished, was killed")
	require.NotContains(t, rep.Extra, "unexpected_lines")
	require.NotContains(t, rep.Extra, "unknown_tasks")
	require.NotContains(t, rep.Extra, "runs_without_markers_line")
}

// logTimeline logs the lateness of the tasks due in each second from from to to.
func logTimeline(t *testing.T, r *recorder, from, to time.Time) {
	for s := from; s.Before(to); s = s.Add(time.Second) {
		p50, p99, maxMs, n := r.lateness(s, s.Add(time.Second))
		t.Logf("%s: %d due, lateness p50 %.0f p99 %.0f max %.0f ms", s.Format("15:04:05"), n, p50, p99, maxMs)
	}
}
