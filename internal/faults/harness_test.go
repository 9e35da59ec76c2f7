//go:build faults

package faults_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/producer"
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

// TestWorkerProcess is the worker process of the fault tests: a default worker (16
// handlers) on the queue its parent names. It says "ready" once it has polled, then
// "started <task> <due ns> <start ns> <attempt>" as each handler starts, before the task
// is acked, and "failed <op>" for each PartitionFailed event. It stops when its standard
// input closes. Run without its parent's environment it has nothing to do and returns.
func TestWorkerProcess(t *testing.T) {
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
	w, err := worker.New(cassandratest.SessionFor(t, ks), worker.Config{
		Queue:       os.Getenv(queueEnv),
		Concurrency: 16,
		Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			say("started %s %d %d %d", task.ID, task.DueAt.UnixNano(), time.Now().UnixNano(), task.Attempt)
			select {
			case <-time.After(handlerWork):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
		Observer: shardq.ObserverFunc(func(_ context.Context, e shardq.Event) {
			if f, ok := e.(shardq.PartitionFailed); ok {
				say("failed %s", f.Op)
			}
		}),
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
	script, err := filepath.Abs("../../scripts/cassandra")
	require.NoError(t, err)
	c := &cluster{t: t, script: script}
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

// signal sends sig to node's process.
func (c *cluster) signal(node int, sig syscall.Signal) {
	c.t.Helper()
	require.NoError(c.t, syscall.Kill(c.pid(node), sig))
	c.t.Logf("node %d (%s): %v", node, c.hosts[node-1], sig)
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
	t       *testing.T
	ks      string
	session *gocql.Session
	q       shardq.QueueConfig
	p       *producer.Producer
	rec     *recorder

	mu      sync.Mutex
	workers []*proc
}

func newEnv(t *testing.T, q shardq.QueueConfig) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ks: keyspace(t), rec: newRecorder()}
	e.session = cassandratest.SessionFor(t, e.ks)
	cassandratest.ApplySchema(t, e.session)
	q.Name = "faults"
	var err error
	e.q, err = shardq.CreateQueue(ctx, e.session, q)
	require.NoError(t, err)
	e.p, err = producer.New(e.session, producer.Config{})
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
		for j := range tasks {
			tasks[j] = producer.Task{Queue: e.q.Name, DueAt: start.Add(time.Duration(i+j) * step)}
		}
		ids, err := e.p.ScheduleTasks(context.Background(), tasks)
		require.NoError(e.t, err)
		e.rec.scheduled(ids)
		all = append(all, ids...)
	}
	return all, start.Add(time.Duration(n-1) * step)
}

// waitStarted returns once n scheduled tasks have started, or fails the test after
// within, saying where the first that have not are.
func (e *env) waitStarted(n int, within time.Duration) {
	e.t.Helper()
	started, missing := e.rec.waitStarted(n, within)
	if missing == nil {
		return
	}
	for _, id := range missing {
		info, err := e.p.Get(context.Background(), id)
		if err != nil {
			e.t.Logf("task %s: %v", id, err)
			continue
		}
		e.t.Logf("task %s: %s, due %s, attempt %d, lease until %s", id, info.State,
			info.DueAt.Format(time.StampMilli), info.Attempt, info.LeaseUntil.Format(time.StampMilli))
	}
	require.FailNow(e.t, "tasks did not start in time", "%d of %d started within %v (keyspace %s)", started, n, within, e.ks)
}

// proc is one worker process.
type proc struct {
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
	p := &proc{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); line == "ready" {
				close(ready)
			} else {
				e.rec.line(line)
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
	require.NoError(e.t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
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
	attempt    int
}

// recorder gathers what the worker processes report.
type recorder struct {
	mu     sync.Mutex
	want   map[uuid.UUID]bool
	runs   map[uuid.UUID][]delivery
	failed map[string]int // PartitionFailed events by op
	bad    []string       // lines that made no sense
	// waiters are told when the number of scheduled tasks that started reaches theirs.
	waiters map[*waiter]bool
	started int // scheduled tasks started at least once
}

type waiter struct {
	n    int
	done chan struct{}
}

func newRecorder() *recorder {
	return &recorder{want: map[uuid.UUID]bool{}, runs: map[uuid.UUID][]delivery{}, failed: map[string]int{},
		waiters: map[*waiter]bool{}}
}

func (r *recorder) scheduled(ids []uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.want[id] = true
		if len(r.runs[id]) > 0 { // started before its ID came back to us
			r.started++
		}
	}
	r.notify()
}

func (r *recorder) line(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := strings.Fields(line)
	switch {
	case len(f) == 2 && f[0] == "failed":
		r.failed[f[1]]++
		return
	case len(f) != 5 || f[0] != "started":
		if line != "PASS" && !strings.HasPrefix(line, "ok ") {
			r.bad = append(r.bad, line)
		}
		return
	}
	id, err1 := uuid.Parse(f[1])
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	start, err3 := strconv.ParseInt(f[3], 10, 64)
	attempt, err4 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		r.bad = append(r.bad, line)
		return
	}
	r.runs[id] = append(r.runs[id], delivery{due: time.Unix(0, due), start: time.Unix(0, start), attempt: attempt})
	if len(r.runs[id]) == 1 && r.want[id] {
		r.started++
		r.notify()
	}
}

// notify tells the waiters whose count was reached. The caller holds r.mu.
func (r *recorder) notify() {
	for w := range r.waiters {
		if r.started >= w.n {
			close(w.done)
			delete(r.waiters, w)
		}
	}
}

// waitStarted returns once n scheduled tasks have started, or after within with up to
// ten of those that have not.
func (r *recorder) waitStarted(n int, within time.Duration) (started int, missing []uuid.UUID) {
	w := &waiter{n: n, done: make(chan struct{})}
	r.mu.Lock()
	r.waiters[w] = true
	r.notify()
	r.mu.Unlock()
	select {
	case <-w.done:
		return n, nil
	case <-time.After(within):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiters, w)
	for id := range r.want {
		if len(r.runs[id]) == 0 && len(missing) < 10 {
			missing = append(missing, id)
		}
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

// report is one fault test's figures.
type report struct {
	Fault      string         `json:"fault"`
	Tasks      int            `json:"tasks"`
	Lost       int            `json:"lost"`
	Duplicates int            `json:"duplicates"`
	P50        float64        `json:"lateness_p50_ms"`
	P99        float64        `json:"lateness_p99_ms"`
	Max        float64        `json:"lateness_max_ms"`
	Failed     map[string]int `json:"partition_failures"`
	Extra      map[string]any `json:"extra,omitempty"`
}

// report counts lost and duplicated tasks, and the lateness of each task's first start.
func (r *recorder) report(fault string) report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{Fault: fault, Tasks: len(r.want), Failed: map[string]int{}, Extra: map[string]any{}}
	var late []time.Duration
	for id := range r.want {
		runs := r.runs[id]
		if len(runs) == 0 {
			rep.Lost++
			continue
		}
		rep.Duplicates += len(runs) - 1
		late = append(late, runs[0].start.Sub(runs[0].due))
	}
	rep.P50, rep.P99, rep.Max = percentiles(late)
	for op, n := range r.failed {
		rep.Failed[op] = n
	}
	if len(r.bad) > 0 {
		rep.Extra["unexpected_lines"] = len(r.bad)
	}
	unknown := 0
	for id := range r.runs {
		if !r.want[id] {
			unknown++
		}
	}
	if unknown > 0 {
		rep.Extra["unknown_tasks"] = unknown
	}
	return rep
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
// lost or a worker said something unexpected.
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
	require.Zero(t, rep.Lost, "lost tasks")
	require.NotContains(t, rep.Extra, "unexpected_lines")
	require.NotContains(t, rep.Extra, "unknown_tasks")
}

// logTimeline logs the lateness of the tasks due in each second from from to to.
func logTimeline(t *testing.T, r *recorder, from, to time.Time) {
	for s := from; s.Before(to); s = s.Add(time.Second) {
		p50, p99, maxMs, n := r.lateness(s, s.Add(time.Second))
		t.Logf("%s: %d due, lateness p50 %.0f p99 %.0f max %.0f ms", s.Format("15:04:05"), n, p50, p99, maxMs)
	}
}
