// Command demo schedules 10,000 tasks due over 10 seconds with mixed priorities,
// drains them with 4 consumers, and prints throughput, lateness and lost/duplicate
// counts. `make demo` runs it against a local node (starting one if none answers).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

func main() {
	var cfg config
	hosts := flag.String("hosts", "127.0.0.1", "comma-separated Cassandra hosts ("+cqlcluster.HostsEnv+" wins when set)")
	flag.StringVar(&cfg.keyspace, "keyspace", "shardq_demo", "keyspace to (re)create for the demo")
	flag.IntVar(&cfg.tasks, "tasks", 10_000, "tasks to schedule")
	flag.DurationVar(&cfg.spread, "spread", 10*time.Second, "due times spread uniformly over this long")
	flag.DurationVar(&cfg.lead, "lead", 0, "how long after scheduling begins the first task is due (0: 1s plus 0.5ms a task, so scheduling ends first)")
	flag.IntVar(&cfg.consumers, "consumers", 4, "consumers draining the queue")
	flag.IntVar(&cfg.batch, "batch", 100, "tasks per AcquireTasks call")
	flag.Parse()
	cfg.hosts = cqlcluster.EnvHosts()
	if len(cfg.hosts) == 0 {
		cfg.hosts = strings.Split(*hosts, ",")
	}
	if cfg.lead == 0 {
		cfg.lead = defaultLead(cfg.tasks)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// config is what the flags set.
type config struct {
	hosts        []string
	keyspace     string
	tasks        int
	spread, lead time.Duration
	consumers    int
	batch        int
}

// defaultLead leaves scheduling time to finish before the first task is due, so that
// lateness measures delivery alone: 0.5 ms a task (a cold node took 0.22, a busy shared
// one 0.46) plus a second.
func defaultLead(tasks int) time.Duration {
	return time.Second + time.Duration(tasks)*500*time.Microsecond
}

func run(ctx context.Context, cfg config) error {
	if cfg.tasks < 1 || cfg.consumers < 1 || cfg.batch < 1 || cfg.spread < 0 || cfg.lead < 0 {
		return errors.New("-tasks, -consumers and -batch must be positive, -spread and -lead not negative")
	}
	session, err := connect(ctx, cfg.hosts, cfg.keyspace)
	if err != nil {
		return err
	}
	defer session.Close()
	s := shardqgocql.New(session)
	q, err := shardq.CreateQueue(ctx, s, shardqtype.QueueConfig{Name: "demo", BucketCount: 60,
		BucketDuration: time.Second, ShardCount: 8, DefaultTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	fmt.Printf("queue %q: %d buckets x %v, %d shards; %d tasks due over %v from %v on, %d consumers\n",
		q.Name, q.BucketCount, q.BucketDuration, q.ShardCount, cfg.tasks, cfg.spread, cfg.lead, cfg.consumers)

	// Consumers start first, as they would in production, and poll until every task came.
	c, err := consumer.New(s, consumer.Config{Queue: q.Name})
	if err != nil {
		return err
	}
	d := startDrain(ctx, c, cfg)
	sc, err := schedule(ctx, s, q.Name, cfg)
	if err != nil {
		d.stop()
		return err
	}
	if err := d.wait(ctx, s, q, cfg.lead+cfg.spread+2*time.Minute); err != nil {
		return err
	}
	return report(sc, d)
}

// connect (re)creates keyspace with shardq's schema and returns a session bound to it.
func connect(ctx context.Context, hosts []string, keyspace string) (*gocql.Session, error) {
	admin, err := cqlcluster.Admin(hosts...).CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", hosts, err)
	}
	defer admin.Close()
	for _, stmt := range []string{
		"DROP KEYSPACE IF EXISTS " + keyspace,
		"CREATE KEYSPACE " + keyspace + " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
	} {
		if err := admin.Query(stmt).WithContext(ctx).Exec(); err != nil {
			return nil, err
		}
	}
	cluster := cqlcluster.New(hosts...)
	cluster.Keyspace = keyspace
	s, err := cluster.CreateSession()
	if err != nil {
		return nil, err
	}
	if err := shardq.ApplySchema(ctx, shardqgocql.New(s)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// scheduled is what the producer did.
type scheduled struct {
	ids        []uuid.UUID
	began, end time.Time // scheduling's
	firstDue   time.Time // where the due window begins
}

// schedule writes cfg.tasks tasks with random priorities, due uniformly over cfg.spread
// from cfg.lead after it begins. With -spread 0 every task is due at once and the drain
// rate is the queue's capacity.
func schedule(ctx context.Context, s *shardq.Driver, queue string, cfg config) (scheduled, error) {
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return scheduled{}, err
	}
	sc := scheduled{began: time.Now()}
	sc.firstDue = sc.began.Add(cfg.lead)
	tasks := make([]producer.Task, cfg.tasks)
	for i := range tasks {
		tasks[i] = producer.Task{Queue: queue, Payload: []byte("demo"), Priority: rand.IntN(10),
			DueAt: sc.firstDue.Add(time.Duration(rand.Int64N(int64(cfg.spread) + 1)))}
	}
	for chunk := range slices.Chunk(tasks, 1000) {
		ids, err := p.ScheduleTasks(ctx, chunk)
		if err != nil {
			return scheduled{}, err
		}
		sc.ids = append(sc.ids, ids...)
	}
	sc.end = time.Now()
	return sc, nil
}

// drain runs the consumers and tallies what they deliver.
type drain struct {
	mu      sync.Mutex
	tally   *tally
	lastAck time.Time // of the last batch that held a task delivered for the first time
	left    []uuid.UUID
	settle  time.Duration

	complete chan struct{} // closed once every task was delivered
	failed   chan error    // a consumer's error; room for each
	quit     chan struct{} // closed to stop the consumers
	wg       sync.WaitGroup
}

func startDrain(ctx context.Context, c *consumer.Consumer, cfg config) *drain {
	d := &drain{tally: newTally(cfg.tasks), complete: make(chan struct{}),
		failed: make(chan error, cfg.consumers), quit: make(chan struct{})}
	for range cfg.consumers {
		d.wg.Go(func() {
			if err := d.consume(ctx, c, cfg.batch); err != nil {
				d.failed <- err
			}
		})
	}
	return d
}

// consume takes and acks batches until quit is closed.
func (d *drain) consume(ctx context.Context, c *consumer.Consumer, batch int) error {
	for {
		select {
		case <-d.quit:
			return nil
		default:
		}
		got, err := c.AcquireTasks(ctx, batch)
		delivered := time.Now()
		if err == nil && len(got) > 0 {
			err = c.AckTasks(ctx, got...)
		}
		if err != nil {
			return err
		}
		if len(got) == 0 {
			select { // the worker runtime polls smarter
			case <-d.quit:
				return nil
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		d.record(delivered, got)
	}
}

func (d *drain) record(delivered time.Time, got []*consumer.Task) {
	acked := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range got {
		if d.tally.seen[t.ID] == 0 {
			d.lastAck = acked
		}
		if d.tally.add(t.ID, delivered.Sub(t.DueAt)) {
			close(d.complete)
		}
	}
}

// wait returns once every task was delivered and the queue settled, a consumer failed or
// timeout passed, with the consumers stopped.
func (d *drain) wait(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig, timeout time.Duration) error {
	defer d.stop()
	select {
	case <-d.complete:
	case err := <-d.failed:
		return err
	case <-time.After(timeout):
		return nil // the report counts what is missing
	}
	start := time.Now()
	left, err := settle(ctx, s, q, start.Add(q.DefaultTimeout+settleGrace))
	d.mu.Lock()
	d.left, d.settle = left, time.Since(start)
	d.mu.Unlock()
	select {
	case ferr := <-d.failed: // while settling
		return ferr
	default:
	}
	return err
}

// settleGrace is how long after a row left in the queue becomes visible the consumers
// (polling every 20 ms) deliver it again at the latest: past the clock skew they allow
// for, and a second for their reads.
const settleGrace = consumer.DefaultMaxClockSkew + time.Second

// settle runs once every task was delivered once, with the consumers still consuming,
// and returns once no task row (a pending task, or the timeout marker of one in flight)
// is left in the queue's partitions, read from the tasks table, or by deadline with the
// tasks of the rows still there. Counting duplicates is worth something only then: a row
// left behind (a marker an ack did not delete, a task a swap did not delete) is delivered
// again once visible, a duplicate, and that is at the latest the end of the last
// deliveries' leases, which deadline allows for. Without a defect the table is empty at
// once, so the lease timeout (30 s) need not be waited out, nor shortened below the
// drain.
func settle(ctx context.Context, s *shardq.Driver, q shardqtype.QueueConfig, deadline time.Time) ([]uuid.UUID, error) {
	for {
		left, err := taskscan.TaskIDs(ctx, s, q, 8, taskscan.PageSize)
		if err != nil {
			return nil, fmt.Errorf("settling: %w", err)
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (d *drain) stop() {
	close(d.quit)
	d.wg.Wait()
}

// report prints what happened, and fails if a task was lost or delivered twice.
func report(sc scheduled, d *drain) error {
	took := sc.end.Sub(sc.began)
	fmt.Printf("scheduled %d tasks in %v: %.0f tasks/s\n", len(sc.ids), took.Round(time.Millisecond), float64(len(sc.ids))/took.Seconds())
	if late := sc.end.Sub(sc.firstDue); late > 0 {
		fmt.Printf("scheduling ended %v after the first due time: lateness includes up to that much scheduling delay (raise -lead)\n",
			late.Round(time.Millisecond))
	}
	if n := len(d.tally.seen); n > 0 {
		window := d.lastAck.Sub(sc.firstDue)
		fmt.Printf("drained and acked %d tasks by %v after the first due time: %.0f tasks/s\n",
			n, window.Round(time.Millisecond), float64(n)/window.Seconds())
		slices.Sort(d.tally.lateness)
		fmt.Printf("lateness (delivery - due time): p50 %v, p99 %v, max %v\n",
			percentile(d.tally.lateness, 0.5), percentile(d.tally.lateness, 0.99), percentile(d.tally.lateness, 1))
	} else {
		fmt.Println("nothing was delivered")
	}
	lost, dups := d.tally.outcome(sc.ids, d.left)
	fmt.Printf("lost %d, duplicates %d (settled in %v: %d task rows left in the queue)\n",
		lost, dups, d.settle.Round(time.Millisecond), len(d.left))
	if lost > 0 || dups > 0 {
		return fmt.Errorf("%d lost, %d duplicated", lost, dups)
	}
	return nil
}

// tally counts deliveries per task and keeps each delivery's lateness.
type tally struct {
	want     int
	seen     map[uuid.UUID]int
	lateness []time.Duration
}

func newTally(want int) *tally { return &tally{want: want, seen: make(map[uuid.UUID]int, want)} }

// add counts a delivery of id, late by late. It reports whether the delivery completed
// the set: true once, for the first delivery of the last task missing, so that
// duplicates after it signal nothing.
func (t *tally) add(id uuid.UUID, late time.Duration) bool {
	t.seen[id]++
	t.lateness = append(t.lateness, late)
	return t.seen[id] == 1 && len(t.seen) == t.want
}

// outcome counts the scheduled tasks never acked: never delivered, or still in the queue
// (left) after settling, since an ack is what takes a delivered task's rows out; and the
// deliveries beyond the first, of a task acked or not.
func (t *tally) outcome(scheduled, left []uuid.UUID) (lost, dups int) {
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

// percentile is the p-th (0 to 1) of sorted, rounded to the millisecond; 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))].Round(time.Millisecond)
}
