// Command bench measures shardq against a Cassandra cluster: how fast tasks are
// scheduled and drained, how late they run, what an idle worker costs, how reads hold
// up over a long run, how shard counts and batch sizes trade off, and what the same
// Cassandra work costs without the queue's logic (the ceiling every figure is a ratio to).
//
//	go run . -workload burst,spread,idle,ceiling -json results.jsonl
//
// Run it from this directory: it is a module of its own, so that the library does not
// require its chart library, and -cassandra-pid's default is relative to it.
//
// Each workload prints a table, and one JSON object per line (to -json, or stdout).
// Each runs in a fresh keyspace (-keyspace, dropped and made again).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardq/shardq/shardqtype"
)

type options struct {
	hosts     string
	keyspace  string
	workloads string
	jsonPath  string
	chartPath string
	via       string
	driver    string

	shards, buckets int
	bucket, timeout time.Duration
	consumers       int
	batch           int

	burstTasks int

	burstWorkerTasks    int
	burstWorkerHandlers int

	spreadTasks    int
	spreadOver     time.Duration
	spreadHandlers int

	steadyRate     int
	steadyDuration time.Duration
	steadyLead     time.Duration

	trickleRate     int
	trickleDuration time.Duration
	profileDir      string

	idleFor          time.Duration
	idleQueues       int
	idleBuckets      int
	idleShards       int
	idleInterval     time.Duration
	idlePending      int
	idleRestartAfter time.Duration
	cassandraPIDFile string
	rf               int

	soakTasks int
	soakRate  int

	sweepTasks                 int
	sweepShards, sweepBuckets  string
	sweepConsumers, sweepBatch string
	targetRate                 float64
	targetP99                  time.Duration

	ceilingTasks int

	reshardRate   int
	reshardWindow time.Duration
	reshardShards int
	reshardBucket time.Duration

	skewTasks                int
	skewOver, skewBound      time.Duration
	skewDue                  string
	producerSkew, workerSkew time.Duration
	producersIn, skewAs      string
	workers, concurrency     int
}

func main() {
	runChildIfAsked() // trickle's producer and worker processes are this binary too
	var o options
	flag.StringVar(&o.hosts, "hosts", "127.0.0.1", "comma-separated Cassandra hosts (SHARDQ_CASSANDRA_HOSTS wins when set)")
	flag.StringVar(&o.keyspace, "keyspace", "shardq_bench", "keyspace each workload drops and makes again")
	flag.StringVar(&o.workloads, "workload", "burst", "comma-separated workloads: burst, burst-worker, steady, spread, trickle, idle, soak, sweep, ceiling, skew, reshard, or all (all but skew and reshard, which waits out a layout change)")
	flag.StringVar(&o.jsonPath, "json", "", "append JSON lines to this file (default: print them on stdout)")
	flag.StringVar(&o.chartPath, "chart", "sweep.png", "PNG file for the sweep's chart")
	flag.StringVar(&o.driver, "driver", driverGocql, "the driver shardq runs on, through its adapter: gocql (github.com/gocql/gocql v1, shardqgocql) or gocqlv2 (github.com/apache/cassandra-gocql-driver/v2, shardqgocqlv2), in this process and trickle's and skew's children; the admin session (keyspaces, truncations), ceiling's store session and soak's tombstone tracing stay on gocql")
	flag.StringVar(&o.via, "via", viaWorker, "burst-worker, trickle, idle: worker (producer.Producer and worker.Worker) or client (a shardq.Client inserts the tasks and runs them)")

	// A lap (buckets × bucket) longer than the schema's gc_grace_seconds (600 s), so that
	// tombstones can be purged before consumers come back to a partition.
	flag.IntVar(&o.shards, "shards", 16, "queue concurrency shards (burst, spread, soak, ceiling)")
	flag.IntVar(&o.buckets, "buckets", 150, "queue time buckets per lap")
	flag.DurationVar(&o.bucket, "bucket", 5*time.Second, "queue bucket duration")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "task timeout (kept longer than any drain, so no lease expires)")
	flag.IntVar(&o.consumers, "consumers", 8, "consumers (burst, soak, ceiling)")
	flag.IntVar(&o.batch, "batch", 100, "tasks per AcquireTasks call")

	flag.IntVar(&o.burstTasks, "burst-tasks", 100_000, "burst: tasks scheduled due at once")

	flag.IntVar(&o.burstWorkerTasks, "burst-worker-tasks", 100_000, "burst-worker: tasks scheduled due at once, on a queue with default settings")
	flag.IntVar(&o.burstWorkerHandlers, "burst-worker-handlers", 64, "burst-worker, steady: Concurrency of the one worker that drains them")

	flag.IntVar(&o.steadyRate, "rate", 2500, "steady: tasks due per second, all scheduled up front")
	flag.DurationVar(&o.steadyDuration, "duration", 20*time.Second, "steady: how long tasks come due")
	flag.DurationVar(&o.steadyLead, "steady-lead", 0, "steady: from the start of scheduling to the first due time (0: 5 s plus 1 s per 10,000 tasks)")

	flag.IntVar(&o.spreadTasks, "spread-tasks", 50_000, "spread: tasks scheduled while workers run")
	flag.DurationVar(&o.spreadOver, "spread-over", 20*time.Second, "spread: due times uniform over this long")
	flag.IntVar(&o.spreadHandlers, "handlers", 64, "spread: worker Concurrency (a fetch takes at most Concurrency+Prefetch tasks)")

	flag.IntVar(&o.trickleRate, "trickle-rate", 10, "trickle: tasks scheduled per second, one per call, by a producer process")
	flag.DurationVar(&o.trickleDuration, "trickle-duration", 20*time.Second, "trickle: how long the producer process schedules")
	flag.StringVar(&o.profileDir, "profile-dir", "", "trickle: a directory where the producer and worker processes write CPU profiles (<role>.pprof)")

	flag.DurationVar(&o.idleFor, "idle-for", 20*time.Second, "idle: how long to count requests")
	flag.IntVar(&o.idleQueues, "idle-queues", 1, "idle: queues, each a default queue, that one client serves (-via client)")
	flag.IntVar(&o.idleBuckets, "idle-buckets", shardqtype.DefaultBucketCount, "idle: queue time buckets")
	flag.IntVar(&o.idleShards, "idle-shards", shardqtype.DefaultShardCount, "idle: queue concurrency shards")
	flag.DurationVar(&o.idleInterval, "idle-interval", 0, "idle: worker MaxIdleInterval (0: the worker's default)")
	flag.IntVar(&o.idlePending, "pending", 0, "idle: tasks left backed off, their retries spread over the lap")
	flag.DurationVar(&o.idleRestartAfter, "idle-restart-after", 0, "idle, -via client: a first client serves the queues this long and stops; the start-up counted is the next one's, as in a rolling restart (0: the first client's)")
	flag.StringVar(&o.cassandraPIDFile, "cassandra-pid", "../.run/cassandra/node1/pid", "idle, burst-worker, steady: comma-separated PID files of the local nodes whose CPU seconds are summed")
	flag.IntVar(&o.rf, "rf", 1, "replication factor of the bench keyspace")

	flag.IntVar(&o.soakTasks, "soak-tasks", 1_000_000, "soak: tasks pushed through")
	flag.IntVar(&o.soakRate, "soak-rate", 4000, "soak: tasks scheduled per second")

	flag.IntVar(&o.sweepTasks, "sweep-tasks", 10_000, "sweep: tasks per grid point")
	flag.StringVar(&o.sweepShards, "sweep-shards", "4,16", "sweep: shard counts")
	flag.StringVar(&o.sweepBuckets, "sweep-bucket", "1s,10s", "sweep: bucket durations")
	flag.StringVar(&o.sweepConsumers, "sweep-consumers", "4,8", "sweep: consumer counts")
	flag.StringVar(&o.sweepBatch, "sweep-batch", "50,200", "sweep: batch sizes")
	flag.Float64Var(&o.targetRate, "target-rate", 0, "sweep: tasks/s the recommended layout must drain, before 1.5x headroom (0: none, the fastest point)")
	flag.DurationVar(&o.targetP99, "target-p99", 500*time.Millisecond, "sweep: the most lateness p99 the recommended point may have had (0: no bound)")

	flag.IntVar(&o.ceilingTasks, "ceiling-tasks", 50_000, "ceiling: rows per measurement")

	flag.IntVar(&o.reshardRate, "reshard-rate", 2000, "reshard: tasks scheduled (and due a second later) per second")
	flag.DurationVar(&o.reshardWindow, "reshard-window", 30*time.Second, "reshard: how long each measured window (before, during and after the change) lasts")
	flag.IntVar(&o.reshardShards, "reshard-shards", 16, "reshard: the concurrency shards the queue changes to (from the default)")
	flag.DurationVar(&o.reshardBucket, "reshard-bucket", 0, "reshard: the bucket duration the queue changes to (0: unchanged)")

	flag.IntVar(&o.skewTasks, "skew-tasks", 10_000, "skew: tasks scheduled, half by each of two producers")
	flag.DurationVar(&o.skewOver, "skew-over", 30*time.Second, "skew: tasks are scheduled (-skew-due now) or due (ahead) evenly over this long")
	flag.StringVar(&o.skewDue, "skew-due", "now", "skew: now (DueAt zero, scheduled over -skew-over) or ahead (all scheduled at the start, due over -skew-over)")
	flag.DurationVar(&o.skewBound, "skew-bound", 90*time.Second, "skew: how long after the last due time a task may run before it counts as lost")
	flag.DurationVar(&o.producerSkew, "producer-skew", 4*time.Second, "skew: how far one producer's clock trails (the other is on time)")
	flag.StringVar(&o.producersIn, "producers-in", "one", "skew: one (both producers in one process, one session) or two processes")
	flag.DurationVar(&o.workerSkew, "worker-skew", 0, "skew: how far every worker's clock leads")
	flag.StringVar(&o.skewAs, "skew-as", "clock", "skew: clock (the offsets are each part's Config.Clock) or host (each part runs on the default clock of a host whose own clock is offset)")
	flag.IntVar(&o.workers, "workers", 2, "skew: worker processes")
	flag.IntVar(&o.concurrency, "concurrency", 16, "skew: each worker's Concurrency")
	flag.Parse()

	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.rf < 1 {
		return fmt.Errorf("-rf %d: want at least 1", o.rf)
	}
	names := strings.Split(o.workloads, ",")
	if o.workloads == "all" {
		names = []string{"burst", "burst-worker", "steady", "ceiling", "spread", "trickle", "idle", "sweep", "soak"}
	}
	if err := checkVia(o, names); err != nil {
		return err
	}
	b, err := newBench(o)
	if err != nil {
		return err
	}
	defer b.close()
	workloads := map[string]func(context.Context) error{
		"burst": b.burst, "burst-worker": b.burstWorker, "steady": b.steady, "spread": b.spread, "trickle": b.trickle,
		"idle": b.idle, "soak": b.soak, "sweep": b.sweep, "ceiling": b.ceiling,
		"skew": b.skew, "reshard": b.reshard,
	}
	for _, name := range names {
		w, ok := workloads[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown workload %q", name)
		}
		if err := w(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	b.ratios()
	return nil
}

// checkVia rejects -via and -idle-queues where they would not mean what they say: a
// workload run through a worker while -via client was asked for, or idle's settings a
// client does not have.
func checkVia(o options, names []string) error {
	switch o.via {
	case viaWorker:
		switch {
		case o.idleQueues != 1:
			return fmt.Errorf("-idle-queues %d: one worker serves one queue; add -via client", o.idleQueues)
		case o.idleRestartAfter != 0:
			return fmt.Errorf("-idle-restart-after: a restart is counted for a client; add -via client")
		}
		return nil
	case viaClient:
	default:
		return fmt.Errorf("-via %q: want %s or %s", o.via, viaWorker, viaClient)
	}
	for _, name := range names {
		if n := strings.TrimSpace(name); n != "burst-worker" && n != "trickle" && n != "idle" {
			return fmt.Errorf("-via client: workload %q does not run through a client (burst-worker, trickle and idle do)", n)
		}
	}
	switch {
	case o.idleQueues < 1:
		return fmt.Errorf("-idle-queues %d: want at least 1", o.idleQueues)
	case o.idleInterval != 0:
		return fmt.Errorf("-idle-interval: a client's workers keep the default MaxIdleInterval")
	case o.idleRestartAfter < 0:
		return fmt.Errorf("-idle-restart-after %v: want 0 or more", o.idleRestartAfter)
	}
	return nil
}
