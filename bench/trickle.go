package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// The environment through which trickle hands its child processes their part: roleEnv
// names the part, the others what it works on.
const (
	roleEnv     = "SHARDQ_BENCH_ROLE"
	hostsEnv    = "SHARDQ_BENCH_HOSTS"
	keyspaceEnv = "SHARDQ_BENCH_KEYSPACE"
	queueEnv    = "SHARDQ_BENCH_QUEUE"
	rateEnv     = "SHARDQ_BENCH_RATE"
	durationEnv = "SHARDQ_BENCH_DURATION"
	viaEnv      = "SHARDQ_BENCH_VIA"
	profileEnv  = "SHARDQ_BENCH_PROFILE_DIR" // where a child writes <role>.pprof, if set

	roleTrickleProducer = "trickle-producer"
	roleTrickleWorker   = "trickle-worker"

	trickleWorkerConcurrency = 16
	trickleInFlight          = 64
)

// trickle runs a producer and a worker in two processes of their own, as a service and
// its workers would be deployed, so that no wake-up inside one process helps: the producer
// schedules tasks due now, one ScheduleTask call each, at R tasks/s for T, and lateness
// is handler start (in the worker's process) minus due time. It reports the rate the
// producer reached next to R, and the CPU seconds of the server and of each process over
// one window (see cpuAt). With -via client the producer inserts with an insert-only
// client, one Insert call each, and the worker process is a client serving the queue.
func (b *bench) trickle(ctx context.Context) error {
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "trickle"})
	if err != nil {
		return err
	}
	rate, over := b.o.trickleRate, b.o.trickleDuration
	if rate <= 0 || over <= 0 {
		return fmt.Errorf("-trickle-rate and -trickle-duration must be positive")
	}
	env := append(os.Environ(), hostsEnv+"="+strings.Join(b.hosts, ","), keyspaceEnv+"="+b.o.keyspace,
		queueEnv+"="+q.Name, rateEnv+"="+strconv.Itoa(rate), durationEnv+"="+over.String(),
		profileEnv+"="+b.o.profileDir, viaEnv+"="+b.o.via, driverEnv+"="+b.o.driver)
	n := int(float64(rate) * over.Seconds())
	tr := newTracker(n)

	// The worker first, and only once it has polled: its first poll looks back a whole lap.
	wk, err := startReady(roleTrickleWorker, env, func(line string) error {
		id, lateUs, ok := strings.Cut(line, " ")
		u, err1 := uuid.Parse(id)
		late, err2 := strconv.ParseInt(lateUs, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("unexpected line %q", line)
		}
		tr.record(u, time.Duration(late)*time.Microsecond)
		return nil
	})
	if err != nil {
		return err
	}
	defer wk.stop(5 * time.Second) //nolint:errcheck // only reached first on an error path

	// Then the producer, which connects, says "ready" and waits for "go", so that its
	// start is outside the window too; it prints each task's ID as it is scheduled, then
	// "done" and how long scheduling took.
	var idsMu sync.Mutex
	ids := make([]uuid.UUID, 0, n)
	prReady, prDone := make(chan struct{}), make(chan struct{})
	var window time.Duration // the producer's scheduling window, once prDone is closed
	pr, err := startChild(roleTrickleProducer, env, func(line string) error {
		if line == "ready" {
			close(prReady)
			return nil
		}
		if us, ok := strings.CutPrefix(line, "done "); ok {
			v, err := strconv.ParseInt(us, 10, 64)
			if err != nil {
				return fmt.Errorf("unexpected line %q", line)
			}
			window = time.Duration(v) * time.Microsecond
			close(prDone)
			return nil
		}
		u, err := uuid.Parse(line)
		if err != nil {
			return fmt.Errorf("unexpected line %q", line)
		}
		idsMu.Lock()
		ids = append(ids, u)
		idsMu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	defer pr.stop(5 * time.Second) //nolint:errcheck // only reached first on an error path
	if err := pr.waitReady(prReady); err != nil {
		return err
	}
	nodes := b.cassandraPIDs()
	cpu0 := readCPU(nodes, wk, pr)
	if err := pr.send("go"); err != nil {
		return fmt.Errorf("starting %s: %w", roleTrickleProducer, err)
	}
	stop := make(chan struct{})
	go progress("trickle", n, func() int { return int(tr.delivered.Load()) }, stop)

	// Until the producer is done and every task it scheduled ran, or the bound passes.
	limit := time.After(over + time.Minute)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	timedOut := false
wait:
	for {
		select {
		case <-poll.C:
		case <-limit:
			timedOut = true
			break wait
		case <-wk.read:
			close(stop)
			return fmt.Errorf("%s exited early: %v", roleTrickleWorker, wk.stop(5*time.Second))
		}
		select {
		case <-prDone:
			idsMu.Lock()
			produced := len(ids)
			idsMu.Unlock()
			if tr.delivered.Load() >= int64(produced) {
				break wait
			}
		case <-pr.read:
			close(stop)
			return fmt.Errorf("%s exited before it was done: %v", roleTrickleProducer, pr.stop(5*time.Second))
		default:
		}
	}
	close(stop)
	cpu1 := readCPU(nodes, wk, pr)
	var set settled
	if !timedOut { // the worker goes on delivering what is left
		if set, err = b.settle(ctx, s, q); err != nil {
			return err
		}
	}
	prErr := pr.stop(30 * time.Second)
	wkErr := wk.stop(time.Minute) // the worker stops gracefully: running handlers finish, acks flush
	if prErr != nil {
		return fmt.Errorf("%s: %w", roleTrickleProducer, prErr)
	}
	if wkErr != nil {
		return fmt.Errorf("%s: %w", roleTrickleWorker, wkErr)
	}
	idsMu.Lock()
	defer idsMu.Unlock()
	lost, dups := tr.lostAndDuplicates(ids, set.left)
	if timedOut {
		fmt.Fprintf(os.Stderr, "trickle: %d of %d tasks did not run within %v\n", lost, len(ids), over+time.Minute)
	}
	p50, p99, mx := percentiles(tr.lateness)
	r := result{"workload": "trickle", "via": b.o.via, "rate": rate, "duration_s": over.Seconds(), "tasks": len(ids),
		"lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_max_ms": mx, "lost": lost, "duplicates": dups,
		"left": len(set.left), "settle_s": set.took.Seconds(),
		"cpu_window_s": cpu1.at.Sub(cpu0.at).Seconds(), "bench_cpu_s": cpu1.self - cpu0.self}
	if window > 0 {
		r["schedule_window_s"] = window.Seconds()
		r["rate_reached"] = float64(len(ids)) / window.Seconds()
	}
	if cpu0.childErr == nil && cpu1.childErr == nil {
		r["producer_cpu_s"] = cpu1.producer - cpu0.producer
		r["worker_cpu_s"] = cpu1.worker - cpu0.worker
	}
	if cpu0.serverErr == nil && cpu1.serverErr == nil {
		r["server_cpu_s"] = cpu1.server - cpu0.server
	}
	b.emit(r)
	return nil
}

// cpuAt is the CPU seconds the local nodes, trickle's producer and worker and this
// process had used at one instant. Read at the start and the end of trickle's window
// (from the producer's first call until every task it scheduled ran), the four figures
// cover the same interval: the children's start, connection, the worker's first poll and
// both their stops fall outside it, as they do for the server. The children's come from
// /proc as the server's do (in ticks of 1/100 s), not from their exit status, which
// would count their whole lives.
type cpuAt struct {
	at                             time.Time
	server, producer, worker, self float64
	serverErr, childErr            error
}

// readCPU reads the CPU seconds of the local nodes, the children and this process.
func readCPU(nodes []int, wk, pr *child) cpuAt {
	c := cpuAt{at: time.Now(), self: selfCPU()}
	c.server, c.serverErr = cpuSeconds(nodes)
	if c.worker, c.childErr = cpuSeconds([]int{wk.cmd.Process.Pid}); c.childErr == nil {
		c.producer, c.childErr = cpuSeconds([]int{pr.cmd.Process.Pid})
	}
	return c
}

// child is a child process of this binary in a role; its stdout lines go to a callback.
type child struct {
	role     string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	read     chan struct{} // closed once its stdout is read to the end
	readErr  error
	stopOnce sync.Once
	stopErr  error
}

// startChild runs this binary again in role with env; onLine gets each line it prints.
// An error from onLine ends the reading, and the child, and is what stop returns.
func startChild(role string, env []string, onLine func(string) error) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{role: role, cmd: exec.Command(exe), read: make(chan struct{})}
	c.cmd.Env = append(env, roleEnv+"="+role)
	c.cmd.Stderr = os.Stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", role, err)
	}
	go func() {
		defer close(c.read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if err := onLine(sc.Text()); err != nil {
				c.readErr = err
				c.cmd.Process.Kill()        //nolint:errcheck // it may have exited
				io.Copy(io.Discard, stdout) //nolint:errcheck // until it has
				return
			}
		}
		c.readErr = sc.Err()
	}()
	return c, nil
}

// startReady starts a worker child as startChild does and waits until it prints "ready"
// (a line onLine does not get).
func startReady(role string, env []string, onLine func(string) error) (*child, error) {
	ready := make(chan struct{})
	c, err := startChild(role, env, func(line string) error {
		if line == "ready" {
			close(ready)
			return nil
		}
		return onLine(line)
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-ready:
		return c, nil
	case <-c.read:
		err = fmt.Errorf("%s exited before it was ready: %v", role, c.stop(5*time.Second))
	case <-time.After(2 * time.Minute):
		err = fmt.Errorf("%s not ready within 2m", role)
	}
	c.stop(5 * time.Second) //nolint:errcheck // err says what went wrong
	return nil, err
}

// stop closes the child's stdin, which tells it to stop, reads its stdout to the end and
// waits for it to exit, killing it if that takes longer than grace. Later calls return
// the first one's result.
func (c *child) stop(grace time.Duration) error {
	c.stopOnce.Do(func() {
		c.stdin.Close()
		select {
		case <-c.read:
		case <-time.After(grace):
			c.cmd.Process.Kill() //nolint:errcheck // it may have exited just now
			<-c.read
			c.stopErr = fmt.Errorf("did not stop within %v", grace)
		}
		if err := c.cmd.Wait(); err != nil && c.stopErr == nil {
			c.stopErr = err
		}
		if c.readErr != nil {
			c.stopErr = c.readErr
		}
	})
	return c.stopErr
}

// send writes a line to the child's stdin.
func (c *child) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// waitReady waits until ready is closed (the child said so), failing if it exits first
// or takes more than two minutes.
func (c *child) waitReady(ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	case <-c.read:
		return fmt.Errorf("%s exited before it was ready: %v", c.role, c.stop(5*time.Second))
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s not ready within 2m", c.role)
	}
}

// selfCPU is the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)).Seconds()
}

// runChildIfAsked runs this process as a workload's child, and exits, when roleEnv names
// a role. main and TestMain call it first thing.
func runChildIfAsked() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	// Stop on SIGTERM or SIGINT, or when the parent closes stdin (or dies); a "go" line
	// on stdin starts the producer.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	begin := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for begun := false; sc.Scan(); {
			if sc.Text() == "go" && !begun {
				close(begin)
				begun = true
			}
		}
		cancel() // any end of stdin means stop
	}()
	out = newLineOut(os.Stdout)
	stopProfile, err := profile(role)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		os.Exit(1)
	}
	switch role {
	case roleTrickleProducer:
		err = trickleProducer(ctx, begin)
	case roleTrickleWorker:
		err = trickleWorker(ctx)
	case roleSkewProducer:
		err = skewProducer(ctx)
	case roleSkewWorker:
		err = skewWorker(ctx)
	default:
		err = fmt.Errorf("unknown role")
	}
	cancel()
	stopProfile()
	out.close() //nolint:errcheck // a parent gone also closes stdin
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// profile starts a CPU profile of this child when profileEnv names a directory, and
// returns what ends it.
func profile(role string) (stop func(), err error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, role+".pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: writing its profile: %v\n", role, err)
		}
	}, nil
}

// childSession connects to the keyspace and queue the parent named, through the driver
// it named (driverGocql when it named none), and returns the driver, what closes its
// session, and the queue. When answers is not nil, it counts the frames the session
// receives: one per request answered.
func childSession(answers *atomic.Int64) (*shardq.Driver, func(), string, error) {
	name := os.Getenv(driverEnv)
	if name == "" {
		name = driverGocql
	}
	d, closeSession, err := openDriver(name, libSession{hosts: strings.Split(os.Getenv(hostsEnv), ","),
		keyspace: os.Getenv(keyspaceEnv), frames: answers})
	if err != nil {
		return nil, nil, "", err
	}
	return d, closeSession, os.Getenv(queueEnv), nil
}

// frameCounter counts frames received. Unlike a query observer (counter), for which gocql
// builds a record of every request and counter names its kind, it costs the measured
// process next to nothing: a query observer took a tenth of a client worker's CPU at
// 2,000 tasks/s.
type frameCounter struct{ n *atomic.Int64 }

func (c frameCounter) ObserveFrameHeader(context.Context, gocql.ObservedFrameHeader) { c.n.Add(1) }

// trickleProducer connects, prints "ready" and, once begin is closed, schedules
// rate×duration tasks due now, one call per task (trickleScheduler), the i-th sent i/rate
// s after it starts, as a service's requests would each schedule one; it prints each
// task's ID as soon as it is scheduled, then "done <µs>": how long scheduling took, from
// the first call to the return of the last (the window of the rate it reached). It then
// waits to be told to stop, so that its CPU time can be read at the end of the parent's
// window. At most trickleInFlight calls wait at once, so that a rate above what one
// caller at a time reaches holds; when even that falls behind, calls go out as soon as
// one returns.
func trickleProducer(ctx context.Context, begin <-chan struct{}) error {
	rate, err := strconv.Atoi(os.Getenv(rateEnv))
	if err != nil {
		return err
	}
	over, err := time.ParseDuration(os.Getenv(durationEnv))
	if err != nil {
		return err
	}
	s, closeSession, queue, err := childSession(nil)
	if err != nil {
		return err
	}
	defer closeSession()
	schedule, err := trickleScheduler(s, queue)
	if err != nil {
		return err
	}
	if err := readyLine(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-begin:
	}
	n := int(float64(rate) * over.Seconds())
	start := time.Now()
	err = paced(ctx, n, func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / time.Duration(rate)) },
		func(ctx context.Context, i int) error {
			id, err := schedule(ctx, i)
			if err != nil {
				return err
			}
			return out.printf("%s\n", id)
		})
	if err != nil {
		return err
	}
	took := time.Since(start)
	if took > over+over/10 {
		fmt.Fprintf(os.Stderr, "trickle: the producer took %v to schedule %d tasks meant to take %v\n",
			took.Round(time.Millisecond), n, over)
	}
	if err := out.printf("done %d\n", took.Microseconds()); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// trickleScheduler returns what schedules the producer's i-th task: one ScheduleTask
// call, or with -via client one Insert call of an insert-only client.
func trickleScheduler(s *shardq.Driver, queue string) (func(ctx context.Context, i int) (uuid.UUID, error), error) {
	if os.Getenv(viaEnv) == viaClient {
		c, err := shardq.NewClient(s, shardq.Config{})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, i int) (uuid.UUID, error) {
			res, err := c.Insert(ctx, args, &shardq.InsertOpts{Queue: queue, Priority: i % 10})
			return res.ID, err
		}, nil
	}
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, i int) (uuid.UUID, error) {
		return p.ScheduleTask(ctx, producer.Task{Queue: queue, Payload: payload, Priority: i % 10})
	}, nil
}

// paced calls send(ctx, i) for each i in [0, n), at at(i) or, when that has passed, as
// soon as one of the trickleInFlight calls that may wait at once returns. It stops at
// the first error send returns, which it returns, or when ctx ends.
func paced(ctx context.Context, n int, at func(i int) time.Time, send func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, trickleInFlight)
	var wg sync.WaitGroup
send:
	for i := range n {
		if wait := time.Until(at(i)); wait > 0 {
			select {
			case <-ctx.Done():
				break send
			case <-time.After(wait):
			}
		}
		select {
		case <-ctx.Done():
			break send
		case slots <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := send(ctx, i); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err // a failed call, not the parent telling it to stop
	}
	return nil
}

// trickleWorker runs a worker with Concurrency 16 and otherwise default settings until
// told to stop, then stops it gracefully. It prints "ready" once the worker has polled,
// then "<task ID> <lateness in µs>" as each handler starts. With -via client the worker
// is a client's, serving the queue with Concurrency 16 (see trickleClient).
func trickleWorker(ctx context.Context) error {
	if os.Getenv(viaEnv) == viaClient {
		return trickleClient(ctx)
	}
	s, closeSession, queue, err := childSession(nil)
	if err != nil {
		return err
	}
	defer closeSession()
	_, err = serveWorker(ctx, s, worker.Config{Queue: queue, Concurrency: trickleWorkerConcurrency,
		Handler: worker.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			late := time.Since(t.DueAt)
			out.printf("%s %d\n", t.ID, late.Microseconds()) //nolint:errcheck // a parent gone also closes stdin
			return nil
		})})
	return err
}

// trickleClient is trickleWorker's process through a client. A client does not say when
// it has polled; it prints "ready" once its requests, as answers count them, tell
// (waitPolled).
func trickleClient(ctx context.Context) error {
	var answers atomic.Int64
	s, closeSession, queue, err := childSession(&answers)
	if err != nil {
		return err
	}
	defer closeSession()
	c, err := newClient(s, []string{queue}, trickleWorkerConcurrency, nil, func(t *shardq.Task[benchArgs]) {
		late := time.Since(t.DueAt)
		out.printf("%s %d\n", t.ID, late.Microseconds()) //nolint:errcheck // a parent gone also closes stdin
	})
	if err != nil {
		return err
	}
	// Not ctx: cancelling Start's context stops the client hard.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	polled := waitPolled(ctx, 1, answers.Load)
	if polled == nil {
		readyLine() //nolint:errcheck // a parent gone also closes stdin
		<-ctx.Done()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(polled, c.Stop(stopCtx))
}

// serveWorker runs a worker with cfg until ctx ends, then stops it gracefully and
// returns its stats. It prints "ready" once the worker has polled.
func serveWorker(ctx context.Context, s *shardq.Driver, cfg worker.Config) (worker.Stats, error) {
	w, err := worker.New(s, cfg)
	if err != nil {
		return worker.Stats{}, err
	}
	// Not ctx: cancelling Start's context stops the worker hard.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return worker.Stats{}, err
	}
	for w.Stats().Polls == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	readyLine() //nolint:errcheck // a parent gone also closes stdin
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.Stop(stopCtx)
	return w.Stats(), err
}

// readyLine tells the parent that this child is ready, at once.
func readyLine() error {
	if err := out.printf("ready\n"); err != nil {
		return err
	}
	return out.flush()
}

// out is where a child prints its lines.
var out *lineOut

// lineOut buffers a child's lines and writes them out every lineFlush, so that neither
// the child nor the parent makes a system call per task: at thousands of tasks a second
// that costs as much CPU as the queue under test, on the cores it shares. Lateness is
// measured in the worker's handler, before the line is buffered.
type lineOut struct {
	mu   sync.Mutex
	w    *bufio.Writer
	done chan struct{}
	wg   sync.WaitGroup
}

const lineFlush = 5 * time.Millisecond

func newLineOut(w io.Writer) *lineOut {
	o := &lineOut{w: bufio.NewWriterSize(w, 64<<10), done: make(chan struct{})}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(lineFlush)
		defer t.Stop()
		for {
			select {
			case <-o.done:
				return
			case <-t.C:
				o.flush() //nolint:errcheck // a parent gone also closes stdin
			}
		}
	}()
	return o
}

func (o *lineOut) printf(format string, args ...any) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := fmt.Fprintf(o.w, format, args...)
	return err
}

func (o *lineOut) flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Flush()
}

// close stops the periodic flush and writes what is left.
func (o *lineOut) close() error {
	close(o.done)
	o.wg.Wait()
	return o.flush()
}
