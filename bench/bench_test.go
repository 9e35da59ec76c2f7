package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// TestMain lets trickle run this test binary again as its producer and worker processes.
func TestMain(m *testing.M) {
	runChildIfAsked()
	os.Exit(m.Run())
}

// TestWorkloadsSmall runs every workload at a tiny size against the real cluster and
// checks each writes its JSON line with the documented fields, no task lost or
// duplicated, and the sweep's chart as a PNG.
func TestWorkloadsSmall(t *testing.T) {
	dir := t.TempDir()
	o := options{
		hosts: strings.Join(cassandratest.Hosts(t), ","), keyspace: cassandratest.Keyspace(t),
		workloads: "all", via: viaWorker, jsonPath: filepath.Join(dir, "out.jsonl"), chartPath: filepath.Join(dir, "sweep.png"),
		shards: 4, buckets: 60, bucket: time.Second, timeout: 30 * time.Second, consumers: 4, batch: 50,
		burstTasks: 600, burstWorkerTasks: 2000, burstWorkerHandlers: 64,
		steadyRate: 200, steadyDuration: 2 * time.Second,
		spreadTasks: 300, spreadOver: 2 * time.Second, spreadHandlers: 16,
		trickleRate: 20, trickleDuration: 2 * time.Second,
		idleFor: 2 * time.Second, idleQueues: 1, idleBuckets: 50, idleShards: 20, cassandraPIDFile: "/nonexistent", rf: 1,
		soakTasks: 1500, soakRate: 1000,
		sweepTasks: 300, sweepShards: "2", sweepBuckets: "1s", sweepConsumers: "2", sweepBatch: "20,50",
		ceilingTasks: 600,
	}
	t.Setenv(cqlcluster.HostsEnv, "") // o.hosts says where the cluster is
	require.NoError(t, run(context.Background(), o))

	f, err := os.Open(o.jsonPath)
	require.NoError(t, err)
	defer f.Close()
	byWorkload := map[string]map[string]any{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		byWorkload[r["workload"].(string)] = r
		require.Equal(t, driverGocql, r["driver"], r["workload"])
		if lost, ok := r["lost"]; ok {
			require.Zero(t, lost, r["workload"])
			require.Zero(t, r["duplicates"], r["workload"])
			require.Zero(t, r["left"], r["workload"])
		}
	}
	want := map[string][]string{
		"burst":        {"schedule_tasks_per_s", "drain_tasks_per_s", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "lost", "duplicates", "left", "settle_s"},
		"burst-worker": {"tasks", "handlers", "drain_tasks_per_s", "requests_per_task", "schedule_tasks_per_s", "lost", "duplicates", "left", "settle_s"},
		"steady":       {"rate", "duration_s", "tasks", "handlers", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "early", "lost", "duplicates", "left", "settle_s", "window_s", "requests", "requests_per_task", "requests_per_s"},
		"spread":       {"lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "lost", "duplicates", "left", "settle_s"},
		"trickle":      {"rate", "rate_reached", "schedule_window_s", "duration_s", "tasks", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "lost", "duplicates", "left", "settle_s", "cpu_window_s", "producer_cpu_s", "worker_cpu_s", "bench_cpu_s"},
		"idle":         {"idle_requests_per_s"},
		"soak":         {"acquire_p50_ms", "acquire_p99_ms", "tombstones_per_read", "drain_tasks_per_s", "lost", "duplicates", "left", "settle_s"},
		"sweep":        {"drain_tasks_per_s", "lateness_p99_ms"},
		"ceiling":      {"ceiling_insert_rows_per_s", "ceiling_drain_tasks_per_s", "ceiling_lwt_cycles_per_s"},
		"ratios":       {"schedule_vs_insert_ceiling", "drain_vs_drain_ceiling"},
	}
	for w, fields := range want {
		require.Contains(t, byWorkload, w)
		for _, field := range fields {
			require.Contains(t, byWorkload[w], field, w)
		}
	}
	// The rate reached is the tasks scheduled over the producer's window, which the CPU
	// window (until the last task ran) spans.
	// A task is never delivered before its due time; steady's due times are all ahead.
	require.Zero(t, byWorkload["steady"]["early"])
	require.EqualValues(t, 400, byWorkload["steady"]["tasks"])
	tr := byWorkload["trickle"]
	require.InDelta(t, tr["tasks"].(float64)/tr["schedule_window_s"].(float64), tr["rate_reached"], 1e-9)
	require.InDelta(t, o.trickleDuration.Seconds(), tr["schedule_window_s"], 1, "the producer held the small rate")
	require.Greater(t, tr["cpu_window_s"], tr["schedule_window_s"], "the window runs until the last task ran")
	png, err := os.ReadFile(o.chartPath)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(png), "\x89PNG"), "the chart is a PNG")
}

// TestViaClientSmall runs the workloads that go through a client at a tiny size, the
// idle client serving three queues, and checks each writes its JSON line with the same
// fields as through a worker, and no task lost or duplicated.
func TestViaClientSmall(t *testing.T) {
	dir := t.TempDir()
	o := options{
		hosts: strings.Join(cassandratest.Hosts(t), ","), keyspace: cassandratest.Keyspace(t),
		workloads: "burst-worker,trickle,idle", via: viaClient, jsonPath: filepath.Join(dir, "out.jsonl"),
		burstWorkerTasks: 2000, burstWorkerHandlers: 64, trickleRate: 20, trickleDuration: 2 * time.Second,
		idleFor: 2 * time.Second, idleQueues: 3, idleBuckets: 50, idleShards: 20, cassandraPIDFile: "/nonexistent", rf: 1,
	}
	t.Setenv(cqlcluster.HostsEnv, "") // o.hosts says where the cluster is
	require.NoError(t, run(context.Background(), o))

	raw, err := os.ReadFile(o.jsonPath)
	require.NoError(t, err)
	byWorkload := map[string]map[string]any{}
	for line := range strings.Lines(string(raw)) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		require.Equal(t, viaClient, r["via"])
		byWorkload[r["workload"].(string)] = r
	}
	for w, fields := range map[string][]string{
		"burst-worker": {"tasks", "handlers", "drain_tasks_per_s", "requests_per_task", "schedule_tasks_per_s", "lost", "duplicates", "left"},
		"trickle":      {"rate_reached", "tasks", "lateness_p50_ms", "lateness_p99_ms", "lost", "duplicates", "left", "producer_cpu_s", "worker_cpu_s"},
		"idle":         {"idle_requests_per_s", "queues", "delivered", "bench_cpu_s"},
	} {
		require.Contains(t, byWorkload, w)
		for _, field := range fields {
			require.Contains(t, byWorkload[w], field, w)
		}
		if _, ok := byWorkload[w]["lost"]; ok {
			require.Zero(t, byWorkload[w]["lost"], w)
			require.Zero(t, byWorkload[w]["duplicates"], w)
			require.Zero(t, byWorkload[w]["left"], w)
		}
	}
	require.EqualValues(t, 3, byWorkload["idle"]["queues"])
	require.EqualValues(t, 40, byWorkload["trickle"]["tasks"])
}

// TestViaChecked: -via client is refused for a workload that does not run through a
// client, and -idle-queues without it.
func TestViaChecked(t *testing.T) {
	require.ErrorContains(t, checkVia(options{via: viaClient, idleQueues: 1}, []string{"idle", "burst"}), `"burst"`)
	require.ErrorContains(t, checkVia(options{via: viaWorker, idleQueues: 50}, []string{"idle"}), "-via client")
	require.ErrorContains(t, checkVia(options{via: "clients", idleQueues: 1}, []string{"idle"}), "want worker or client")
	require.NoError(t, checkVia(options{via: viaClient, idleQueues: 50}, []string{"burst-worker", "trickle", "idle"}))
}

// TestDriverV2Small runs the workloads users' paths take at a tiny size on the v2
// driver, through a worker and through a client (whose trickle worker counts frames), and
// checks each line says so, counts requests, and lost or duplicated no task.
func TestDriverV2Small(t *testing.T) {
	for _, via := range []string{viaWorker, viaClient} {
		t.Run(via, func(t *testing.T) {
			dir := t.TempDir()
			o := options{
				hosts: strings.Join(cassandratest.Hosts(t), ","), keyspace: cassandratest.Keyspace(t),
				workloads: "burst-worker,trickle,idle", via: via, driver: driverGocqlV2, jsonPath: filepath.Join(dir, "out.jsonl"),
				burstWorkerTasks: 500, burstWorkerHandlers: 16, trickleRate: 20, trickleDuration: time.Second,
				idleFor: 2 * time.Second, idleQueues: 1, idleBuckets: 50, idleShards: 20, cassandraPIDFile: "/nonexistent", rf: 1,
			}
			t.Setenv(cqlcluster.HostsEnv, "") // o.hosts says where the cluster is
			require.NoError(t, run(context.Background(), o))

			raw, err := os.ReadFile(o.jsonPath)
			require.NoError(t, err)
			byWorkload := map[string]map[string]any{}
			for line := range strings.Lines(string(raw)) {
				var r map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &r))
				require.Equal(t, driverGocqlV2, r["driver"], r["workload"])
				byWorkload[r["workload"].(string)] = r
				if _, ok := r["lost"]; ok {
					require.Zero(t, r["lost"], r["workload"])
					require.Zero(t, r["duplicates"], r["workload"])
					require.Zero(t, r["left"], r["workload"])
				}
			}
			require.Greater(t, byWorkload["burst-worker"]["requests_per_task"], 0.0)
			require.Greater(t, byWorkload["idle"]["idle_requests_per_s"], 0.0)
			require.EqualValues(t, 20, byWorkload["trickle"]["tasks"])
		})
	}
}

// TestDriverChecked: -driver takes gocql or gocqlv2 only.
func TestDriverChecked(t *testing.T) {
	require.NoError(t, checkDriver(driverGocql))
	require.NoError(t, checkDriver(driverGocqlV2))
	require.ErrorContains(t, checkDriver("gocql2"), "want gocql or gocqlv2")
	_, _, err := openDriver("v3", libSession{})
	require.ErrorContains(t, err, `"v3"`)
}

// TestArgsArePayload: a client's bench task carries the same bytes as a worker's.
func TestArgsArePayload(t *testing.T) {
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	require.Equal(t, string(payload), string(raw))
}

// TestSkewSmall runs skew at a tiny size, its producers in two processes, and checks its
// JSON line has the documented fields and counts every task scheduled. It asserts no loss
// or lateness: skew exists to measure those.
func TestSkewSmall(t *testing.T) {
	dir := t.TempDir()
	o := options{
		hosts: strings.Join(cassandratest.Hosts(t), ","), keyspace: cassandratest.Keyspace(t),
		workloads: "skew", via: viaWorker, idleQueues: 1, jsonPath: filepath.Join(dir, "out.jsonl"), rf: 1, buckets: 900, bucket: time.Second,
		skewTasks: 100, skewOver: 2 * time.Second, skewDue: "now", skewBound: 30 * time.Second,
		producerSkew: 4 * time.Second, producersIn: "two", skewAs: "clock", workerSkew: time.Second, workers: 2, concurrency: 4,
	}
	t.Setenv(cqlcluster.HostsEnv, "") // o.hosts says where the cluster is
	require.NoError(t, run(context.Background(), o))

	raw, err := os.ReadFile(o.jsonPath)
	require.NoError(t, err)
	var r map[string]any
	require.NoError(t, json.Unmarshal(raw, &r))
	require.Equal(t, "skew", r["workload"])
	for _, field := range []string{"tasks", "delivered", "lost", "still_in_table", "early", "duplicates",
		"lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "bound_ms", "beyond_bound"} {
		require.Contains(t, r, field)
	}
	require.EqualValues(t, 100, r["tasks"])
	require.EqualValues(t, 0, r["schedule_errors"])
}

// TestDrainCountsRedelivery: a task whose lease ends unacked (as when an ack does not
// take) is delivered again; the drain goes on consuming until the queue is empty, so that
// delivery counts as a duplicate even though every task had already been seen once.
func TestDrainCountsRedelivery(t *testing.T) {
	t.Setenv(cqlcluster.HostsEnv, "") // the options say where the cluster is
	b, err := newBench(options{hosts: strings.Join(cassandratest.Hosts(t), ","), keyspace: cassandratest.Keyspace(t), rf: 1})
	require.NoError(t, err)
	t.Cleanup(b.close)
	ctx := context.Background()
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "redeliver", ShardCount: 2, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 30 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(s, producer.Config{})
	require.NoError(t, err)
	// Taken first (highest priority) by a consumer that never acks it; its lease is short.
	unacked, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: payload, Priority: 9, Timeout: 2 * time.Second})
	require.NoError(t, err)
	c, err := consumer.New(s, consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	taken, err := c.AcquireTasks(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, unacked, taken[0].ID)
	ids, _, err := scheduleAll(ctx, s, q.Name, 20, func(int) time.Time { return time.Time{} })
	require.NoError(t, err)
	ids = append(ids, unacked)

	tr := newTracker(len(ids))
	tr.record(unacked, 0) // its first delivery, whose ack is lost
	d, err := b.drain(ctx, s, q, 2, 10, len(ids), tr, nil, time.Minute)
	require.NoError(t, err)
	lost, dups := tr.lostAndDuplicates(ids, d.left)
	require.Zero(t, lost)
	require.Equal(t, 1, dups, "the unacked task came back once its lease ended")
	require.Empty(t, d.left)
}
