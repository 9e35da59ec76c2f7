package shardqprom_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqprom"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// TestWorkerMetrics runs a worker through success, failure and retry on a real queue and
// reads the counters back from the registry.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := cassandratest.SchemaSession(t)
	_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "mail", BucketCount: 60, BucketDuration: time.Second,
		ShardCount: 2, DefaultTimeout: 10 * time.Second})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	obs, err := shardqprom.New(reg, shardqprom.Config{})
	require.NoError(t, err)

	done := make(chan struct{})
	var handled int
	w, err := worker.New(cassandratest.Driver(s), worker.Config{Queue: "mail", Observer: obs, Concurrency: 1, MaxIdleInterval: 200 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 },
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			handled++
			if string(task.Payload) == "flaky" && task.Attempt == 1 {
				return errors.New("try again")
			}
			if handled == 4 {
				close(done)
			}
			return nil
		})})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	_, err = p.ScheduleTasks(ctx, []producer.Task{{Queue: "mail"}, {Queue: "mail"}, {Queue: "mail", Payload: []byte("flaky")}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("tasks not handled")
	}
	require.NoError(t, w.Stop(ctx))

	count := func(name string, labels ...string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
					}
					if !found {
						continue metric
					}
				}
				if m.GetCounter() != nil {
					total += m.GetCounter().GetValue()
				}
				if m.GetHistogram() != nil {
					total += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return total
	}
	require.Equal(t, 4.0, count("shardq_tasks_acquired_total", "queue", "mail"))
	require.Equal(t, 4.0, count("shardq_tasks_started_total"))
	require.Equal(t, 3.0, count("shardq_tasks_finished_total", "outcome", "success"))
	require.Equal(t, 1.0, count("shardq_tasks_finished_total", "outcome", "error"))
	require.Equal(t, 1.0, count("shardq_tasks_retried_total"))
	require.Equal(t, 3.0, count("shardq_tasks_acked_total"))
	require.Equal(t, 4.0, count("shardq_task_lateness_seconds"))
	require.Positive(t, count("shardq_lock_wait_seconds"))
	require.Positive(t, testutil.CollectAndCount(reg, "shardq_task_duration_seconds"))
}

// TestCoreDoesNotImportPrometheus keeps the adapter optional: no core package may link
// the Prometheus client.
func TestCoreDoesNotImportPrometheus(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"github.com/shardq/shardq", "github.com/shardq/shardq/producer",
		"github.com/shardq/shardq/consumer", "github.com/shardq/shardq/worker", "github.com/shardq/shardq/lock",
		"github.com/shardq/shardq/shard"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		require.NotContains(t, string(out), "prometheus", "%s imports Prometheus", pkg)
		require.False(t, strings.Contains(string(out), "opentelemetry"), pkg)
	}
}
