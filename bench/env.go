package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// bench holds what every workload shares: the cluster, a session whose every request
// is counted, and the results so far (for the ceiling ratios).
type bench struct {
	o        options
	hosts    []string
	admin    *gocql.Session
	closeLib func() // closes the session fresh opened for the library, if open
	requests atomic.Int64
	kinds    sync.Map // what counter counts of each kind of request
	jsonOut  io.Writer
	closers  []func()
	results  map[string]result
	made     bool // the run made the bench keyspace
}

type result map[string]any

func newBench(o options) (*bench, error) {
	hosts := cqlcluster.EnvHosts()
	if len(hosts) == 0 {
		hosts = strings.Split(o.hosts, ",")
	}
	if o.driver == "" {
		o.driver = driverGocql // the flag's default, for options made in code
	}
	if err := checkDriver(o.driver); err != nil {
		return nil, err
	}
	b := &bench{o: o, hosts: hosts, jsonOut: os.Stdout, results: map[string]result{}}
	admin, err := cqlcluster.Admin(hosts...).CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", hosts, err)
	}
	b.admin = admin
	b.closers = append(b.closers, admin.Close)
	if o.jsonPath != "" {
		f, err := os.OpenFile(o.jsonPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		b.jsonOut = f
		b.closers = append(b.closers, func() { f.Close() })
	}
	return b, nil
}

func (b *bench) close() {
	if b.closeLib != nil {
		b.closeLib()
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// fresh empties the bench keyspace (made anew by the run's first call, its tables
// truncated by the others: ten schema changes cost more than the smaller workloads), applies
// the schema and creates queue q, and returns the driver (-driver) of a session on it whose
// requests are counted in b.requests.
func (b *bench) fresh(ctx context.Context, q shardqtype.QueueConfig) (*shardq.Driver, shardqtype.QueueConfig, error) {
	if b.closeLib != nil {
		b.closeLib()
		b.closeLib = nil
	}
	stmts := []string{
		"DROP KEYSPACE IF EXISTS " + b.o.keyspace,
		fmt.Sprintf("CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}", b.o.keyspace, b.o.rf),
	}
	if b.made {
		var err error
		if stmts, err = b.truncations(ctx); err != nil {
			return nil, q, err
		}
	}
	for _, stmt := range stmts {
		if err := b.admin.Query(stmt).WithContext(ctx).Exec(); err != nil {
			return nil, q, err
		}
	}
	b.made = true
	requests := b.counter()
	d, closeLib, err := openDriver(b.o.driver, libSession{hosts: b.hosts, keyspace: b.o.keyspace, numConns: 4, requests: &requests})
	if err != nil {
		return nil, q, err
	}
	b.closeLib = closeLib
	if err := shardq.ApplySchema(ctx, d); err != nil {
		return nil, q, err
	}
	q, err = shardq.CreateQueue(ctx, d, q)
	return d, q, err
}

// truncations are the statements that empty the bench keyspace's tables.
func (b *bench) truncations(ctx context.Context) ([]string, error) {
	var stmts []string
	iter := b.admin.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, b.o.keyspace).WithContext(ctx).Iter()
	for name := ""; iter.Scan(&name); {
		stmts = append(stmts, "TRUNCATE "+b.o.keyspace+"."+name)
	}
	return stmts, iter.Close()
}

// queueConfig is the queue the flags describe.
func (b *bench) queueConfig(name string) shardqtype.QueueConfig {
	return shardqtype.QueueConfig{Name: name, BucketCount: b.o.buckets, BucketDuration: b.o.bucket,
		ShardCount: b.o.shards, DefaultTimeout: b.o.timeout}
}

func (b *bench) counter() counter { return counter{&b.requests, &b.kinds} }

// counter counts every request, and each kind of request apart (see kindOf).
type counter struct {
	n     *atomic.Int64
	kinds *sync.Map // kind -> *atomic.Int64
}

func (c counter) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	c.n.Add(1)
	c.kind(kindOf(q.Statement))
}

func (c counter) ObserveBatch(_ context.Context, b gocql.ObservedBatch) {
	c.n.Add(1)
	c.kind(batchKind(b.Statements))
}

func (c counter) kind(k string) {
	n, _ := c.kinds.LoadOrStore(k, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// snapshot returns the count of each kind of request so far.
func (c counter) snapshot() map[string]int64 {
	out := map[string]int64{}
	c.kinds.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// since returns the counts of each kind of request made since before, most first.
func (c counter) since(before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, n := range c.snapshot() {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// kindOf names a statement by its verb, table and whether it is conditional: what a
// request costs the server depends on these, not on its values.
func kindOf(stmt string) string {
	f := strings.Fields(stmt)
	if len(f) == 0 {
		return "?"
	}
	verb, table := strings.ToUpper(f[0]), "?"
	for i, w := range f {
		switch u := strings.ToUpper(w); {
		case (u == "FROM" || u == "INTO") && i+1 < len(f):
			table = f[i+1]
		case verb == "UPDATE" && i == 1:
			table = w
		}
		if table != "?" {
			break
		}
	}
	k := verb + " " + strings.TrimSuffix(table, "(")
	if up := strings.ToUpper(stmt); strings.Contains(up, " IF ") {
		k += " IF"
	}
	return k
}

// tracker records deliveries, to count lost and duplicated tasks and lateness.
type tracker struct {
	mu        sync.Mutex
	want      int
	seen      map[uuid.UUID]int
	lateness  []time.Duration
	dues      []time.Time // beside lateness, when recordDue gave them
	delivered atomic.Int64
	all       chan struct{} // closed once want tasks were delivered
	lastAck   time.Time
}

func newTracker(n int) *tracker {
	t := &tracker{want: n, seen: make(map[uuid.UUID]int, n), all: make(chan struct{})}
	if n == 0 {
		close(t.all)
	}
	return t
}

// record notes a delivered task, late by lateness, and reports whether it was the task's
// first delivery.
func (t *tracker) record(id uuid.UUID, lateness time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lateness = append(t.lateness, lateness)
	return t.count(id)
}

// recordDue is record for a task due at due, which it keeps beside the lateness.
func (t *tracker) recordDue(id uuid.UUID, due time.Time, lateness time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lateness = append(t.lateness, lateness)
	t.dues = append(t.dues, due)
	return t.count(id)
}

// p99ByTenth returns the lateness p99 of the tasks due in each tenth of [from, from+span),
// in milliseconds (0 for a tenth with none), from what recordDue kept.
func (t *tracker) p99ByTenth(from time.Time, span time.Duration) []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	tenths := make([][]time.Duration, 10)
	for i, due := range t.dues {
		k := min(max(int(due.Sub(from)*10/span), 0), 9)
		tenths[k] = append(tenths[k], t.lateness[i])
	}
	out := make([]float64, 10)
	for k, ds := range tenths {
		_, out[k], _ = percentiles(ds)
	}
	return out
}

// deliver notes a delivered task without keeping its lateness, for runs too large to
// keep one figure per delivery.
func (t *tracker) deliver(id uuid.UUID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count(id)
}

func (t *tracker) count(id uuid.UUID) bool {
	if t.seen[id]++; t.seen[id] > 1 {
		return false
	}
	if t.delivered.Add(1) == int64(t.want) {
		close(t.all)
	}
	return true
}

// acked notes the time of an ack that took tasks delivered for the first time: the last
// is when the drain was done, however late a duplicate is acked after it.
func (t *tracker) acked(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at.After(t.lastAck) {
		t.lastAck = at
	}
}

// lostAndDuplicates compares deliveries with the scheduled IDs. A task is lost when it was
// never acked: never delivered, or delivered but still in the queue (left, as settle
// returns it) after the drain, since an ack is what takes a delivered task's rows out of
// the queue; the bench cannot see a worker's acks one by one, so it reads the table for
// all workloads alike. Every delivery beyond a task's first is a duplicate, including
// one of a task already acked.
func (t *tracker) lostAndDuplicates(scheduled, left []uuid.UUID) (lost, dups int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	stuck := make(map[uuid.UUID]bool, len(left))
	for _, id := range left {
		stuck[id] = true
	}
	for _, id := range scheduled {
		n := t.seen[id]
		if n == 0 || stuck[id] {
			lost++
		}
		if n > 1 {
			dups += n - 1
		}
	}
	return lost, dups
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

// progress prints done/total, rate and ETA every two seconds until stop is closed.
func progress(name string, total int, done func() int, stop <-chan struct{}) {
	start := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			fmt.Fprintf(os.Stderr, "\r%-80s\r", "")
			return
		case <-tick.C:
			n := done()
			rate := float64(n) / time.Since(start).Seconds()
			eta := "?"
			if rate > 0 {
				eta = time.Duration(float64(total-n) / rate * float64(time.Second)).Round(time.Second).String()
			}
			fmt.Fprintf(os.Stderr, "\r%s: %d/%d tasks, %.0f/s, ETA %s   ", name, n, total, rate, eta)
		}
	}
}

// emit prints r as a table and as one JSON line, and keeps it for the ratios.
func (b *bench) emit(r result) {
	name := r["workload"].(string)
	if _, ok := r["driver"]; !ok {
		r["driver"] = b.o.driver
	}
	b.results[name] = r
	keys := make([]string, 0, len(r))
	for k := range r {
		if k != "workload" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	fmt.Printf("\n== %s\n", name)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		v := r[k]
		if f, ok := v.(float64); ok {
			v = fmt.Sprintf("%.1f", f)
		}
		fmt.Fprintf(tw, "%s\t%v\n", k, v)
	}
	tw.Flush()
	line, _ := json.Marshal(r)
	fmt.Fprintln(b.jsonOut, string(line))
}

// ratios prints each queue figure as a share of its ceiling, when both ran.
func (b *bench) ratios() {
	c, ok := b.results["ceiling"]
	if !ok {
		return
	}
	r := result{"workload": "ratios"}
	if burst, ok := b.results["burst"]; ok {
		r["schedule_vs_insert_ceiling"] = burst["schedule_tasks_per_s"].(float64) / c["ceiling_insert_rows_per_s"].(float64)
		r["drain_vs_drain_ceiling"] = burst["drain_tasks_per_s"].(float64) / c["ceiling_drain_tasks_per_s"].(float64)
	}
	if len(r) > 1 {
		b.emit(r)
	}
}

// startRecording starts a default worker of queue with handlers handlers, each recording its
// task's delivery and lateness in tr.
func startRecording(ctx context.Context, s *shardq.Driver, queue string, handlers int, tr *tracker) (*worker.Worker, error) {
	w, err := worker.New(s, worker.Config{Queue: queue, Concurrency: handlers,
		Handler: worker.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			tr.recordDue(t.ID, t.DueAt, time.Since(t.DueAt))
			return nil
		})})
	if err != nil {
		return nil, err
	}
	return w, w.Start(ctx)
}

// stopRecording lets w deliver what is left, unless waiting for the tasks ids failed with
// waitErr, stops it, and counts the tasks lost and duplicated.
func (b *bench) stopRecording(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig, w *worker.Worker, tr *tracker,
	ids []uuid.UUID, waitErr error) (set settled, lost, dups int, err error) {
	if waitErr == nil {
		set, waitErr = b.settle(ctx, s, q)
	}
	if err := stopWorker(ctx, w, waitErr); err != nil {
		return set, 0, 0, err
	}
	lost, dups = tr.lostAndDuplicates(ids, set.left)
	return set, lost, dups, nil
}
