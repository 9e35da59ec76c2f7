package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/random"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/wakewatch"
	"github.com/shardq/shardq/internal/workerloop"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// Limits of a run's world.
const (
	// MaxSkew bounds a process's clock skew: within the consumers' default MaxClockSkew.
	MaxSkew = consumer.DefaultMaxClockSkew
	// maxDrift bounds a clock's drift, in parts per million.
	maxDrift = 200
	// maxStep bounds the forward step of a process's wall clock (see clock).
	maxStep = 4 * time.Second
	// workload is how long producers schedule, cancel and move tasks, faults and crashes
	// happen; heal is how long the world then runs without them, for every task to end.
	workload = 90 * time.Second
	heal     = 150 * time.Second
	// maxDelay bounds how far ahead a task is due.
	maxDelay = 30 * time.Second
	// maxAttempts is the workers' MaxAttempts.
	maxAttempts = 3
	// simBackoff is the workers' Backoff at every attempt.
	simBackoff = time.Second
)

// Config is one run.
type Config struct {
	Seed uint64
	// Faults is the chance of a fault per request in parts per 10,000, drawn from the seed
	// when negative.
	Faults int
	// Log, when set, receives a line per request admitted.
	Log io.Writer
	// Clients runs half the workers as a client runs them (see runWorker). Their watch's
	// wake-ups race the workers' own timers, so such runs replay less often.
	Clients bool
}

// Result is what a run did and what the oracle found wrong.
type Result struct {
	Seed       uint64
	Trace      uint64 // differs between two runs that did not do the same
	Requests   int
	Faults     int
	Crashes    int
	Scheduled  int
	Deliveries int
	// LayoutChanges counts the layout changes made during the run (reshaper).
	LayoutChanges int
	Violations    []string
	// World describes the run's queue and processes as the seed made them; Processes
	// what became of each incarnation.
	World, Processes string
}

// clock is a process's clock: the true time, skewed and drifting, and in some processes
// stepped forward once (a VM resumed, NTP setting a clock that was behind) by up to
// maxStep. Its Elapsed runs at the drifting rate and, as a host's monotonic clock, takes
// no step (clustertime.Stepping). Steps back are not modelled: they make two instants
// read alike, which Elapsed could not tell apart from a wall time alone.
type clock struct {
	start time.Time
	skew  time.Duration
	drift float64
	// stepAt is the true time from which the wall time reads step more; zero step for none.
	stepAt time.Time
	step   time.Duration
}

func (c *clock) Now() time.Time { return c.wall(time.Now()) }

// wall is the clock's reading at true time t.
func (c *clock) wall(t time.Time) time.Time {
	w := t.Add(c.skew + time.Duration(float64(t.Sub(c.start))*c.drift))
	if c.step != 0 && !t.Before(c.stepAt) {
		w = w.Add(c.step)
	}
	return w
}

// Elapsed is the time the clock ran, at its drifting rate, since the true instant at
// which it read since. A time within the step (none is read there, but clustertime
// derives some, a reading plus half a round trip) counts as the step's instant.
func (c *clock) Elapsed(since time.Time) time.Duration {
	at := func(step time.Duration) time.Time {
		return c.start.Add(time.Duration(float64(since.Sub(c.start)-c.skew-step) / (1 + c.drift)))
	}
	t := at(0)
	if c.step != 0 && !t.Before(c.stepAt) {
		t = at(c.step)
		if t.Before(c.stepAt) {
			t = c.stepAt
		}
	}
	return time.Duration(float64(time.Since(t)) * (1 + c.drift))
}

// proc is one simulated process's incarnation: its parts share one session State.
type proc struct {
	name   string
	clock  *clock
	state  *sessionstate.State
	driver *shardqtype.Driver
	dead   chan struct{}
	once   sync.Once
	diedAt atomic.Int64 // true time of the crash, in Unix nanoseconds
	// A worker's: when it started, and its Concurrency (zero for other processes).
	started     time.Time
	concurrency int
}

func (p *proc) crash() {
	p.once.Do(func() {
		p.diedAt.Store(time.Now().UnixNano())
		close(p.dead)
	})
}

func (p *proc) crashedAt() time.Time { return time.Unix(0, p.diedAt.Load()) }

func (p *proc) crashed() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// world is one run: the cluster, the network, the processes and the oracle.
type world struct {
	cfg     Config
	rng     *rand.Rand // the run's setup; each process draws from its own (see rngFor)
	sched   *sched
	cluster *memstore.Cluster
	admin   store.Store // ungated: sets up and reads back
	queue   shardqtype.QueueConfig
	oracle  *oracle
	crashes atomic.Int64

	mu    sync.Mutex
	procs []*proc
	// reshapes are the layout changes asked during the run, and what each returned;
	// changes counts those that returned success.
	reshapes []string
	changes  int
}

// Run runs one seed in a synctest bubble and returns what the oracle found.
func Run(t *testing.T, cfg Config) (res Result, err error) {
	// One thread: goroutines made runnable together then run in an order that varies far
	// less from run to run, so a seed replays (see TestSeedReplays).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(*testing.T) { res, err = run(cfg) })
	return res, err
}

func run(cfg Config) (Result, error) {
	restore := random.Seed(cfg.Seed)
	defer restore()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	if cfg.Faults < 0 {
		cfg.Faults = []int{0, 20, 100, 300}[rng.IntN(4)]
	}
	w := &world{cfg: cfg, rng: rng, sched: newSched(cfg.Seed), oracle: newOracle()}
	w.sched.faults = cfg.Faults
	if cfg.Log != nil {
		w.sched.log = func(q *request, f memstore.Fault) {
			fmt.Fprintf(cfg.Log, "%s %s %s %s fault %d %s\n", stamp(time.Now()), q.proc.name, q.req.Op, q.req.Key, f, q.ident)
		}
	}
	var err error
	if w.cluster, err = memstore.New(memstore.Config{Now: time.Now}); err != nil {
		return Result{}, err
	}
	w.admin = w.cluster.Client(memstore.ClientConfig{Clock: time.Now})
	w.queue = shardqtype.QueueConfig{
		Name:           "q",
		ShardCount:     1 + rng.IntN(3),
		BucketCount:    []int{4, 8, 60}[rng.IntN(3)],
		BucketDuration: []time.Duration{5 * time.Second, 10 * time.Second, time.Minute}[rng.IntN(3)],
		DefaultTimeout: []time.Duration{3 * time.Second, 10 * time.Second}[rng.IntN(2)],
	}.WithDefaults()
	if err := w.queue.Validate(); err != nil {
		return Result{}, err
	}
	if _, _, err := w.admin.Queues().Create(context.Background(), store.Queue(w.queue)); err != nil {
		return Result{}, err
	}

	start := time.Now()
	end := start.Add(workload + heal)
	var wg sync.WaitGroup
	producers := 1 + rng.IntN(2)
	for i := range producers {
		wg.Go(func() { w.producer(i, start.Add(workload)) })
	}
	wg.Go(func() { w.seriesOwner(start.Add(workload)) })
	if w.rngFor("reshape").IntN(reshapeEvery) == 0 {
		wg.Go(func() { w.reshaper(start.Add(workload)) })
	}
	workers := 1 + rng.IntN(3)
	for i := range workers {
		wg.Go(func() { w.worker(i, start.Add(workload), end) })
	}
	w.drive(start.Add(workload))
	w.sched.mu.Lock()
	w.sched.faults = 0
	w.sched.mu.Unlock()
	w.drive(end)
	// The trace of the run proper: which of the processes' last requests, sent as they
	// stop at end, get in is the Go scheduler's choice.
	w.sched.mu.Lock()
	trace := w.sched.trace
	w.sched.mu.Unlock()
	// Every process has ended by now or ends at end; drive until they all have.
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	for {
		select {
		case <-stopped:
		default:
			w.drive(time.Now().Add(time.Second))
			continue
		}
		break
	}
	// What the run left in the store, read before the month that follows passes.
	left := w.leftovers()
	if r, err := w.admin.Series().Get(context.Background(), w.queue.Name, seriesName, true); err == nil && r.Open {
		delete(left, r.TaskID) // its outstanding occurrence waits in the store: the series goes on
	}
	w.quietWrite()
	w.pausedQueue()
	w.resizedQueue()
	w.monthLater(start)
	res := Result{Seed: cfg.Seed, Trace: trace, Requests: w.sched.steps, Crashes: int(w.crashes.Load())}
	for f, n := range w.sched.counts {
		if memstore.Fault(f) != memstore.None {
			res.Faults += n
		}
	}
	res.Scheduled, res.Deliveries = w.oracle.totals()
	res.LayoutChanges = w.changes
	res.Violations = w.oracle.check(w, end, left)
	res.World, res.Processes = w.describe()
	close(w.sched.over)
	return res, nil
}

// describe tells the run's world as the seed made it: the queue and each process's
// clock, and (after the run) each incarnation's measured offset and whether it crashed.
func (w *world) describe() (world, diag string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	procs := slices.SortedFunc(slices.Values(w.procs), func(a, b *proc) int { return strings.Compare(a.name, b.name) })
	var wb, db strings.Builder
	fmt.Fprintf(&wb, "queue %+v, faults %d/10000\n", w.queue, w.cfg.Faults)
	for _, r := range w.reshapes {
		fmt.Fprintf(&wb, "  %s\n", r)
	}
	for _, p := range procs {
		if strings.HasSuffix(p.name, ".0") {
			fmt.Fprintf(&wb, "  %s: skew %s drift %.0f ppm", strings.TrimSuffix(p.name, ".0"), p.clock.skew, p.clock.drift*1e6)
			if p.clock.step != 0 {
				// Into the clock's life, not the run: when a process starts varies.
				fmt.Fprintf(&wb, " step %s %s into its life", p.clock.step, p.clock.stepAt.Sub(p.clock.start))
			}
			wb.WriteString("\n")
		}
		fmt.Fprintf(&db, "  %s: cluster clock offset %s, crashed %v\n", p.name, p.state.Cluster.Offset(), p.crashed())
	}
	return wb.String(), db.String()
}

// drive admits requests until until.
func (w *world) drive(until time.Time) {
	for time.Now().Before(until) {
		synctest.Wait()
		q, wait := w.sched.next()
		if q != nil {
			w.sched.admit(q)
			continue
		}
		d := time.Until(until)
		if wait > 0 && wait < d {
			d = wait
		}
		t := time.NewTimer(d)
		select {
		case <-w.sched.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// newProc starts an incarnation of process name, on a clock of its own (kept across
// restarts: the host is the same).
func (w *world) newProc(name string, c *clock) *proc {
	p := &proc{name: name, clock: c, dead: make(chan struct{}), driver: driver.New(nil)}
	tables := w.cluster.Client(memstore.ClientConfig{Clock: c.Now, Gate: w.sched.gate(p), Later: w.sched.later})
	p.state = sessionstate.New(tables, c, nil)
	sessionstate.Bind(p.driver, p.state)
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	return p
}

// rngFor is the script of process name: what it does, and when. A source per process
// keeps its draws apart from the order in which goroutines run.
func (w *world) rngFor(name string) *rand.Rand {
	return rand.New(rand.NewPCG(w.cfg.Seed, w.sched.draw("script", name)))
}

func newClock(rng *rand.Rand) *clock {
	c := &clock{
		start: time.Now(),
		skew:  time.Duration(rng.Int64N(int64(2*MaxSkew))) - MaxSkew,
		drift: float64(rng.IntN(2*maxDrift+1)-maxDrift) / 1e6,
	}
	// The step is drawn from a source of its own, seeded by the draws above, so that
	// every other draw of the process's script stays as it was.
	steps := rand.New(rand.NewPCG(uint64(c.skew), math.Float64bits(c.drift)))
	if steps.IntN(4) == 0 {
		c.stepAt = c.start.Add(time.Duration(steps.Int64N(int64(workload))))
		c.step = time.Duration(1 + steps.Int64N(int64(maxStep)))
	}
	return c
}

// producer schedules, cancels, moves and replays tasks until until, crashing now and then.
func (w *world) producer(i int, until time.Time) {
	name := fmt.Sprintf("producer-%d", i)
	rng := w.rngFor(name)
	c := newClock(rng)
	for incarnation := 0; time.Now().Before(until); incarnation++ {
		p := w.newProc(fmt.Sprintf("%s.%d", name, incarnation), c)
		ctx, cancel := context.WithCancel(context.Background())
		crashAt := time.Now().Add(time.Duration(rng.Int64N(int64(3 * workload))))
		go func() {
			t := time.NewTimer(time.Until(crashAt))
			defer t.Stop()
			select {
			case <-t.C:
				w.crashes.Add(1)
				p.crash()
				cancel()
			case <-ctx.Done():
			}
		}()
		w.produce(ctx, rng, p, until)
		cancel()
		if !p.crashed() {
			return
		}
		time.Sleep(time.Duration(rng.Int64N(int64(5 * time.Second))))
	}
}

func (w *world) produce(ctx context.Context, rng *rand.Rand, p *proc, until time.Time) {
	pr, err := producer.New(p.driver, producer.Config{})
	if err != nil {
		panic(err)
	}
	for time.Now().Before(until) && ctx.Err() == nil {
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
		switch op := rng.IntN(20); {
		case op < 12:
			w.schedule(ctx, rng, p, pr)
		case op < 15:
			w.cancel(ctx, rng, p, pr)
		case op < 18:
			w.reschedule(ctx, rng, p, pr)
		default:
			w.replay(ctx, rng, p, pr)
		}
	}
}

func (w *world) schedule(ctx context.Context, rng *rand.Rand, p *proc, pr *producer.Producer) {
	n := 1
	if rng.IntN(4) == 0 {
		n = 2 + rng.IntN(4)
	}
	tasks := make([]producer.Task, n)
	for i := range tasks {
		tasks[i] = producer.Task{
			Queue:    w.queue.Name,
			Payload:  []byte(fmt.Sprintf("p%d", rng.IntN(1000))),
			DueAt:    p.state.Cluster.Now().Add(time.Duration(rng.Int64N(int64(maxDelay)))),
			Priority: rng.IntN(3),
		}
		if rng.IntN(3) == 0 {
			tasks[i].Key = fmt.Sprintf("k%d", rng.IntN(4))
		}
	}
	began := time.Now()
	ids, err := pr.ScheduleTasks(ctx, tasks)
	w.oracle.scheduled(p, began, tasks, ids, err)
}

func (w *world) cancel(ctx context.Context, rng *rand.Rand, p *proc, pr *producer.Producer) {
	id, ok := w.oracle.pick(rng)
	if !ok {
		return
	}
	opts := producer.CancelOptions{AfterLease: rng.IntN(2) == 0}
	began := time.Now()
	err := pr.Cancel(ctx, id, opts)
	w.oracle.cancelled(p, id, opts.AfterLease, began, err)
}

func (w *world) reschedule(ctx context.Context, rng *rand.Rand, p *proc, pr *producer.Producer) {
	id, ok := w.oracle.pick(rng)
	if !ok {
		return
	}
	due := p.state.Cluster.Now().Add(time.Duration(rng.Int64N(int64(maxDelay))))
	w.oracle.rescheduling(id, due)
	began := time.Now()
	err := pr.Reschedule(ctx, id, producer.RescheduleOptions{DueAt: due})
	w.oracle.rescheduled(p, id, due, began, err)
}

// replay replays a dead letter, picked by reading them as an operator would.
func (w *world) replay(ctx context.Context, rng *rand.Rand, p *proc, pr *producer.Producer) {
	letters, err := w.admin.DeadLetters().Page(ctx, w.queue.Name, time.Now(), uuid.Nil, 100)
	if err != nil || len(letters) == 0 {
		return
	}
	l := letters[rng.IntN(len(letters))]
	began := time.Now()
	_, err = pr.ReplayDeadLetter(ctx, w.queue.Name, l.ID)
	w.oracle.replayed(p, l.TaskID, began, err)
}

// seriesName names the series that a share of runs keeps.
const seriesName = "s"

// seriesOwner, in a third of the runs, creates a series and pauses and resumes it until
// until, crashing now and then, then resumes it for good: workers run its occurrences
// under the same faults and crashes as other tasks. Its draws come from a source of its
// own, which leaves the worlds of other seeds as they were.
func (w *world) seriesOwner(until time.Time) {
	rng := w.rngFor("series-0")
	if rng.IntN(3) > 0 {
		return
	}
	every := time.Duration(1+rng.IntN(8)) * time.Second
	w.oracle.seriesKept(every, w.queue.DefaultTimeout)
	c := newClock(rng)
	for incarnation := 0; time.Now().Before(until); incarnation++ {
		p := w.newProc(fmt.Sprintf("series-0.%d", incarnation), c)
		ctx, cancel := context.WithCancel(context.Background())
		crashAt := time.Now().Add(time.Duration(rng.Int64N(int64(3 * workload))))
		go func() {
			t := time.NewTimer(time.Until(crashAt))
			defer t.Stop()
			select {
			case <-t.C:
				w.crashes.Add(1)
				p.crash()
				cancel()
			case <-ctx.Done():
			}
		}()
		w.keepSeries(ctx, rng, p, every, until)
		cancel()
		if !p.crashed() {
			break
		}
		time.Sleep(time.Duration(rng.Int64N(int64(5 * time.Second))))
	}
	// Faults have stopped: the last incarnation resumes the series for good.
	p := w.newProc("series-0.last", c)
	cl := w.seriesClient(p)
	for {
		began := time.Now()
		err := cl.Resume(context.Background(), w.queue.Name, seriesName)
		if errors.Is(err, series.ErrNotFound) {
			err = w.createSeries(context.Background(), cl, every)
		}
		w.oracle.seriesCalled(p, "resume", true, began, err)
		if err == nil {
			return
		}
	}
}

func (w *world) seriesClient(p *proc) *series.Client {
	cl, err := series.New(p.driver, series.Config{})
	if err != nil {
		panic(err)
	}
	return cl
}

func (w *world) createSeries(ctx context.Context, cl *series.Client, every time.Duration) error {
	_, err := cl.Create(ctx, series.Series{Queue: w.queue.Name, Name: seriesName, Every: every, Payload: []byte("s")})
	return err
}

// keepSeries creates the series (again: an equal definition changes nothing) and pauses
// and resumes it now and then until until.
func (w *world) keepSeries(ctx context.Context, rng *rand.Rand, p *proc, every time.Duration, until time.Time) {
	cl := w.seriesClient(p)
	for ctx.Err() == nil && time.Now().Before(until) {
		began := time.Now()
		err := w.createSeries(ctx, cl, every)
		w.oracle.seriesCalled(p, "create", false, began, err)
		if err == nil {
			break
		}
	}
	for time.Now().Before(until) && ctx.Err() == nil {
		time.Sleep(time.Duration(rng.Int64N(int64(10 * time.Second))))
		began := time.Now()
		if rng.IntN(2) == 0 {
			err := cl.Pause(ctx, w.queue.Name, seriesName)
			w.oracle.seriesCalled(p, "pause", false, began, err)
		} else {
			err := cl.Resume(ctx, w.queue.Name, seriesName)
			w.oracle.seriesCalled(p, "resume", false, began, err)
		}
	}
}

// worker runs a worker until until, crashing and restarting it now and then, then runs
// one without crashes until end.
func (w *world) worker(i int, until, end time.Time) {
	name := fmt.Sprintf("worker-%d", i)
	rng := w.rngFor(name)
	c := newClock(rng)
	for incarnation := 0; ; incarnation++ {
		p := w.newProc(fmt.Sprintf("%s.%d", name, incarnation), c)
		stopAt := end
		crash := false
		if time.Now().Before(until) && rng.IntN(3) > 0 {
			stopAt = time.Now().Add(time.Duration(rng.Int64N(int64(workload))))
			crash = stopAt.Before(until)
			if !crash {
				stopAt = end
			}
		}
		w.runWorker(rng, p, 0, func() { time.Sleep(time.Until(stopAt)) }, crash)
		if !crash {
			return
		}
		time.Sleep(time.Duration(rng.Int64N(int64(10 * time.Second))))
	}
}

// runWorker runs a worker of concurrency handlers (zero: 1 to 4, drawn) in p until wait
// returns, then stops it, or crashes p.
func (w *world) runWorker(rng *rand.Rand, p *proc, concurrency int, wait func(), crash bool) {
	h := &handler{w: w, p: p}
	if concurrency == 0 {
		concurrency = 1 + rng.IntN(4)
	}
	p.started, p.concurrency = time.Now(), concurrency
	// With Config.Clients, half the workers run as a client runs them: their signals, idle scans' cells and
	// sweeps' slots read by a watch of the process (internal/wakewatch). Chosen by name,
	// not drawn, so that the seed's draws stay as they were.
	client := w.cfg.Clients && (crc32.ChecksumIEEE([]byte(p.name))^uint32(w.cfg.Seed))&1 == 0
	wk, err := workerloop.New(p.driver, workerloop.Config{
		Queue:         w.queue.Name,
		Handler:       h,
		Concurrency:   p.concurrency,
		MaxAttempts:   maxAttempts,
		Backoff:       func(int) time.Duration { return simBackoff },
		Observer:      shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) { w.oracle.observed(p, e) }),
		SharedSignals: client,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	defer func() {
		cancel()
		watching.Wait()
	}()
	if client {
		watch := wakewatch.New(p.state, wakewatch.Config{Queues: []string{w.queue.Name}, Interval: worker.DefaultSignalInterval,
			Ahead: worker.DefaultMaxIdleInterval, LookAhead: workerloop.LookAhead(worker.DefaultMaxIdleInterval),
			MaxClockSkew: consumer.DefaultMaxClockSkew, Clock: p.state.Cluster, Logger: slog.New(slog.DiscardHandler)})
		watching.Go(func() { watch.Run(ctx) })
	}
	if err := wk.Start(ctx); err != nil {
		panic(err)
	}
	wait()
	if crash {
		w.crashes.Add(1)
		p.crash()
		cancel()
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := wk.Stop(sctx); err != nil && !crash && !errors.Is(err, context.Canceled) {
		w.oracle.violate("worker %s stop: %v", p.name, err)
	}
}

// handler runs tasks as the seed says: most succeed at once or after a while, some fail
// (and retry), some outlast their lease.
type handler struct {
	w *world
	p *proc
}

func (h *handler) Handle(ctx context.Context, t *consumer.Task) error {
	d := h.w.oracle.delivered(h.p, t)
	fate := mix(h.w.cfg.Seed ^ uint64(t.Token) ^ uint64(t.Attempt)<<32 ^ uuidBits(t.ID))
	var err error
	switch fate % 20 {
	case 0, 1, 2:
		err = fmt.Errorf("sim: task %s fails attempt %d", t.ID, t.Attempt)
	case 3:
		// Outlast the lease.
		sleep(ctx, t.Timeout+time.Duration(fate>>8%uint64(5*time.Second)))
	default:
		sleep(ctx, time.Duration(fate>>8%uint64(t.Timeout/2)))
	}
	h.w.oracle.finished(d, err)
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func uuidBits(id uuid.UUID) uint64 {
	var x uint64
	for _, b := range id[8:] {
		x = x<<8 | uint64(b)
	}
	return x
}

// monthLater is the run's epilogue: the key claims of the run proper, which last
// taskindex.Keep (30 days) past their tasks' due times, run out while nothing runs, and a
// producer comes back now and then as they do. First it schedules a keyed task and moves
// it past the month (a Reschedule renews the key's claim, docs/design.md, Task lifecycle mechanics), and reuses
// another key within its first claim's span (a task cancelled before it was due, then one
// due at another time, cancelled too). Then, once per key, at a moment drawn over the span
// in which that key's claims end, it schedules a task with the key, due now, and cancels
// it: a key whose tasks all ended is free, whatever is left of its claims, and one whose
// task is still pending is refused. No faults, no crashes, no workers: only the passing of
// time. Its draws come from a source of its own, and it follows the run proper (after its
// trace), which it leaves as it was.
func (w *world) monthLater(start time.Time) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := w.rngFor("month-0")
		// A producer process per moment, each on a host of its own (a clock drifting for a
		// month would be off by far more than MaxClockSkew).
		incarnation := 0
		come := func() (*proc, *producer.Producer) {
			p := w.newProc(fmt.Sprintf("month-0.%d", incarnation), newClock(rng))
			incarnation++
			pr, err := producer.New(p.driver, producer.Config{})
			if err != nil {
				panic(err)
			}
			return p, pr
		}
		ctx := context.Background()
		schedule := func(p *proc, pr *producer.Producer, key string, due time.Time) (uuid.UUID, error) {
			t := producer.Task{Queue: w.queue.Name, Payload: []byte(key), Key: key, DueAt: due}
			began := time.Now()
			ids, err := pr.ScheduleTasks(ctx, []producer.Task{t})
			w.oracle.scheduled(p, began, []producer.Task{t}, ids, err)
			var dup *producer.DuplicateError
			switch {
			case errors.As(err, &dup):
				// The oracle judges the refusal.
			case err != nil:
				w.oracle.violate("a month later, at %s: scheduling a task with key %q: %v", stamp(began), key, err)
			default:
				return ids[0], nil
			}
			return uuid.Nil, err
		}
		cancel := func(p *proc, pr *producer.Producer, id uuid.UUID) {
			began := time.Now()
			err := pr.Cancel(ctx, id, producer.CancelOptions{})
			w.oracle.cancelled(p, id, false, began, err)
			if err != nil {
				w.oracle.violate("a month later: cancelling %s: %v", id, err)
			}
		}
		p, pr := come()
		epilogue := time.Now()
		soon := func() time.Time { return p.state.Cluster.Now().Add(time.Duration(rng.Int64N(int64(maxDelay)))) }
		// Key m: a task that waits past the month.
		pending, err := schedule(p, pr, "m", soon())
		if err == nil {
			due := p.state.Cluster.Now().Add(taskindex.Keep + 4*maxDelay) // past every moment below
			w.oracle.rescheduling(pending, due)
			began := time.Now()
			err := pr.Reschedule(ctx, pending, producer.RescheduleOptions{DueAt: due})
			w.oracle.rescheduled(p, pending, due, began, err)
			if err != nil {
				w.oracle.violate("a month later: rescheduling %s: %v", pending, err)
			}
		}
		// Key n: reused within its first claim's span.
		for range 2 {
			if id, err := schedule(p, pr, "n", soon()); err == nil {
				cancel(p, pr, id)
			}
		}
		// Each key once, over the span in which its claims end: those of the run proper's
		// keys from its start to its end, m's first and n's within maxDelay of now.
		type probe struct {
			key string
			at  time.Time
		}
		within := func(from time.Time, d time.Duration) time.Time {
			return from.Add(taskindex.Keep + time.Duration(rng.Int64N(int64(d))))
		}
		var probes []probe
		for _, key := range []string{"k0", "k1", "k2", "k3"} {
			probes = append(probes, probe{key, within(start, epilogue.Sub(start))})
		}
		probes = append(probes, probe{"m", within(epilogue, 2*maxDelay)}, probe{"n", within(epilogue, maxDelay)})
		slices.SortStableFunc(probes, func(a, b probe) int { return a.at.Compare(b.at) })
		for _, pb := range probes {
			time.Sleep(time.Until(pb.at))
			p, pr := come()
			if id, err := schedule(p, pr, pb.key, p.state.Cluster.Now()); err == nil {
				cancel(p, pr, id)
			}
		}
		if pending != uuid.Nil {
			p, pr := come()
			cancel(p, pr, pending)
		}
	}()
	w.driveUntil(done)
}

// driveUntil admits requests until done is closed.
func (w *world) driveUntil(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		synctest.Wait()
		if q, wait := w.sched.next(); q != nil {
			w.sched.admit(q)
		} else if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-w.sched.wake:
			case <-t.C:
			case <-done:
			}
			t.Stop()
		} else {
			select {
			case <-w.sched.wake:
			case <-done:
			}
		}
	}
}

// quietWrite, after the run: a write of due-now tasks times out having applied while an
// idle worker holds floors for their partition (such a write once touched no
// wake-up signal, so the worker passed the partition by until its bucket came round
// again). Every task of the write must still start within the lateness bound; and again
// for a write that applied but whose touch failed.
func (w *world) quietWrite() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := w.rngFor("quiet-0")
		c := newClock(rng)
		wp := w.newProc("quiet-w.0", c)
		stop := make(chan struct{})
		var workerDone sync.WaitGroup
		// Handlers for every task of a write, so that none waits for a free one.
		workerDone.Go(func() { w.runWorker(rng, wp, 64, func() { <-stop }, false) })
		defer workerDone.Wait()
		defer close(stop)
		pp := w.newProc("quiet-p.0", c)
		// One shard per task until each has one, and one send per write, so the forced
		// timeout below fails the call: what is tested is the touch after a failed write.
		pr, err := producer.New(pp.driver, producer.Config{ShardRate: 1, WriteAttempts: 1})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		batch := func() []producer.Task {
			tasks := make([]producer.Task, 4*w.queue.ShardCount) // every shard, nearly always
			for i := range tasks {
				tasks[i] = producer.Task{Queue: w.queue.Name, Payload: []byte("quiet"), DueAt: pp.state.Cluster.Now()}
			}
			return tasks
		}
		// ended waits until every task of ids has run to success or died, as the loss check
		// asks, for at most a few retries' time.
		ended := func(ids []uuid.UUID) {
			for from := time.Now(); !w.oracle.allEnded(ids) && time.Since(from) < 2*time.Minute; {
				time.Sleep(100 * time.Millisecond)
			}
		}
		// Start at a bucket's start, so that both writes land in its partitions.
		l := w.queue.Layout()
		now := pp.state.Cluster.Now()
		time.Sleep(l.BucketStart(l.Bucket(now) + 1).Sub(now))
		first := batch()
		began := time.Now()
		ids, err := pr.ScheduleTasks(ctx, first)
		w.oracle.scheduled(pp, began, first, ids, err)
		if err != nil {
			w.oracle.violate("quiet write: scheduling the first tasks: %v", err)
			return
		}
		// Once they have run, the worker has read their partitions up to now and is idle.
		ended(ids)
		time.Sleep(time.Second)
		w.sched.force(pp, "Tasks.Write", memstore.TimeoutApplied)
		second := batch()
		began = time.Now()
		ids, err = pr.ScheduleTasks(ctx, second)
		returned := time.Now()
		w.oracle.scheduled(pp, began, second, ids, err)
		if err == nil {
			w.oracle.violate("quiet write: a write that timed out returned no error")
			return
		}
		w.startedWithin(ids, began, fmt.Sprintf("quiet write: tasks written at %s by a write that timed out having applied (returned at %s: %v)", stamp(began), stamp(returned), err))
		ended(ids)

		// The same with a write that applied and returned success, whose touch of the
		// signals was refused: the failed touch must be tried again. The refusal may meet
		// the touch that announces the rows' cells before the write instead, when the
		// write falls into a bucket the producer has not written into: nothing is written
		// then, and a write without a fault announces the cells for the next try.
		var primed []uuid.UUID
		for try := 0; ; try++ {
			w.sched.force(pp, "Signals.Touch", memstore.Unavailable)
			third := batch()
			began = time.Now()
			ids, err = pr.ScheduleTasks(ctx, third)
			w.oracle.scheduled(pp, began, third, ids, err)
			if err == nil {
				break
			}
			if !errors.Is(err, signal.ErrNotAnnounced) || try == 3 {
				w.oracle.violate("quiet write: scheduling tasks whose touch fails: %v", err)
				return
			}
			primer := batch()
			began = time.Now()
			ids, err = pr.ScheduleTasks(ctx, primer)
			w.oracle.scheduled(pp, began, primer, ids, err)
			if err != nil {
				w.oracle.violate("quiet write: scheduling tasks after a refused announce: %v", err)
				return
			}
			primed = append(primed, ids...)
		}
		w.startedWithin(ids, began, fmt.Sprintf("quiet write: tasks written at %s whose signal touch was refused", stamp(began)))
		ended(append(ids, primed...))
	}()
	w.driveUntil(done)
}

// startedWithin waits until every task of ids has started, and reports a broken promise
// if that takes longer than the lateness bound from began.
func (w *world) startedWithin(ids []uuid.UUID, began time.Time, what string) {
	for !w.oracle.allDelivered(ids) {
		if time.Since(began) > lateness {
			w.oracle.violate("%s had not all started %s later (bound %s)", what, time.Since(began).Round(time.Millisecond), lateness)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pausedQueue, after the run: a worker drains tasks due now, the queue is paused, more
// come due, and it is resumed. None of them may be leased from SettingsRefresh after
// PauseQueue returned (and the fetch then under way, a second or two without faults)
// until ResumeQueue, and each must start within twice SettingsRefresh of the resume, plus
// the lateness bound.
func (w *world) pausedQueue() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := w.rngFor("pause-0")
		c := newClock(rng)
		wp := w.newProc("pause-w.0", c)
		stop := make(chan struct{})
		var workerDone sync.WaitGroup
		workerDone.Go(func() { w.runWorker(rng, wp, 64, func() { <-stop }, false) })
		defer workerDone.Wait()
		defer close(stop)
		pp := w.newProc("pause-p.0", c)
		pr, err := producer.New(pp.driver, producer.Config{})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		schedule := func() []uuid.UUID {
			tasks := make([]producer.Task, 4*w.queue.ShardCount)
			for i := range tasks {
				tasks[i] = producer.Task{Queue: w.queue.Name, Payload: []byte("paused"), DueAt: pp.state.Cluster.Now()}
			}
			began := time.Now()
			ids, err := pr.ScheduleTasks(ctx, tasks)
			w.oracle.scheduled(pp, began, tasks, ids, err)
			if err != nil {
				w.oracle.violate("paused queue: scheduling: %v", err)
			}
			return ids
		}
		ended := func(ids []uuid.UUID) {
			for from := time.Now(); !w.oracle.allEnded(ids) && time.Since(from) < 2*time.Minute; {
				time.Sleep(100 * time.Millisecond)
			}
		}
		ended(schedule())
		if err := shardq.PauseQueue(ctx, pp.driver, w.queue.Name); err != nil {
			w.oracle.violate("paused queue: pausing: %v", err)
			return
		}
		effective := time.Now().Add(shardqtype.SettingsRefresh + 2*time.Second)
		time.Sleep(time.Until(effective))
		waiting := schedule()
		time.Sleep(time.Duration(rng.Int64N(int64(3 * shardqtype.SettingsRefresh))))
		if err := shardq.ResumeQueue(ctx, pp.driver, w.queue.Name); err != nil {
			w.oracle.violate("paused queue: resuming: %v", err)
			return
		}
		resumed := time.Now()
		for _, d := range w.oracle.deliveriesOf(waiting) {
			if d.leased().Before(resumed) {
				w.oracle.violate("paused queue: task %s leased at %s, paused from %s until %s", d.task, stamp(d.leased()), stamp(effective), stamp(resumed))
			}
		}
		by := resumed.Add(2*shardqtype.SettingsRefresh + lateness)
		for !w.oracle.allDelivered(waiting) {
			if time.Now().After(by) {
				w.oracle.violate("paused queue: tasks due while it was paused had not all started %s after the resume at %s",
					time.Since(resumed).Round(time.Millisecond), stamp(resumed))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		ended(waiting)
	}()
	w.driveUntil(done)
}

// resizedQueue, after the run: a producer schedules tasks due over the coming seconds and
// a few due in the next lap (at most ten minutes on) while the queue's layout changes
// twice, the second change once the first took effect, and two workers run them. The
// checks of the run cover them: none may be lost or start before it is due. One seed in
// resizeEvery has it: its workers poll for minutes of queue time, which would double the
// CI budget's time if every seed did.
func (w *world) resizedQueue() {
	if w.rngFor("resize").IntN(resizeEvery) != 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := w.rngFor("resize-0")
		stop := make(chan struct{})
		var workersDone sync.WaitGroup
		for i := range 2 {
			name := fmt.Sprintf("resize-w.%d", i)
			wrng := w.rngFor(name)
			wp := w.newProc(name, newClock(wrng))
			workersDone.Go(func() { w.runWorker(wrng, wp, 16, func() { <-stop }, false) })
		}
		defer workersDone.Wait()
		defer close(stop)
		pp := w.newProc("resize-p.0", newClock(rng))
		pr, err := producer.New(pp.driver, producer.Config{})
		if err != nil {
			panic(err)
		}
		ctx := context.Background()
		var ids []uuid.UUID
		schedule := func(n int, within, after time.Duration) {
			tasks := make([]producer.Task, n)
			for i := range tasks {
				due := pp.state.Cluster.Now().Add(after + time.Duration(rng.Int64N(int64(within))))
				tasks[i] = producer.Task{Queue: w.queue.Name, Payload: []byte("resized"), DueAt: due}
			}
			began := time.Now()
			got, err := pr.ScheduleTasks(ctx, tasks)
			w.oracle.scheduled(pp, began, tasks, got, err)
			ids = append(ids, got...)
		}
		schedule(4, time.Second, min(w.queue.Layout().Lap(), 10*time.Minute))
		for range 2 {
			var ch shardqtype.LayoutChange
			// Layouts the queue's default timeout fits in, tried in a random order.
			tried := 0
			for _, i := range rng.Perm(12) {
				cfg := shardqtype.LayoutConfig{ShardCount: 1 + i%4, BucketDuration: []time.Duration{time.Second, 5 * time.Second, 10 * time.Second}[i/4]}
				if ch, err = shardq.ChangeLayout(ctx, pp.driver, w.queue.Name, cfg); !errors.Is(err, shardqtype.ErrInvalid) {
					break
				}
				tried++
			}
			if err != nil {
				w.oracle.violate("resized queue: changing the layout (%d tried): %v", tried, err)
				return
			}
			for time.Now().Before(ch.From.Add(5 * time.Second)) {
				schedule(2, 10*time.Second, 0)
				time.Sleep(500 * time.Millisecond)
			}
		}
		for from := time.Now(); !w.oracle.allEnded(ids) && time.Since(from) < 15*time.Minute; {
			time.Sleep(time.Second)
		}
	}()
	w.driveUntil(done)
}

// resizeEvery: one seed in resizeEvery changes its queue's layout after the run.
const resizeEvery = 8

// reshapeEvery: one seed in reshapeEvery changes its queue's layout during the run.
const reshapeEvery = 4

// reshaper changes the queue's layout during the run, every 5 to 30 s, to a random shard
// count, bucket length and bucket count (laps shorter and longer than the queue's), over
// the simulated network, while producers schedule, cancel, move and replay, the series and
// its keeper run, and processes crash. A change the queue cannot take (its DefaultTimeout
// does not fit the lap) or asked while another has yet to take effect is refused; one
// whose outcome stayed unknown may have been made. Every promise the oracle checks holds
// through them.
func (w *world) reshaper(until time.Time) {
	rng := w.rngFor("reshape-0")
	p := w.newProc("reshape.0", newClock(rng))
	for {
		time.Sleep(time.Duration(5+rng.IntN(26)) * time.Second)
		if !time.Now().Before(until) {
			return
		}
		cfg := shardqtype.LayoutConfig{
			ShardCount:     1 + rng.IntN(4),
			BucketCount:    []int{4, 8, 30, 60}[rng.IntN(4)],
			BucketDuration: []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, time.Minute}[rng.IntN(4)],
		}
		ch, err := shardq.ChangeLayout(context.Background(), p.driver, w.queue.Name, cfg)
		w.mu.Lock()
		w.reshapes = append(w.reshapes, fmt.Sprintf("layout change at %s to %+v: %+v, %v", stamp(time.Now()), cfg, ch, err))
		if err == nil {
			w.changes++
		}
		w.mu.Unlock()
	}
}
