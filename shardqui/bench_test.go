package shardqui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// benchTasksEnv sets how many pending tasks BenchmarkQueuePage loads (default 10,000).
// The dashboard's goal is the page of a queue of 1,000,000 in at most 3 s:
//
//	SHARDQ_UI_BENCH_TASKS=1000000 go -C shardqui test -run '^$' -bench QueuePage -benchtime 1x -timeout 30m .
const benchTasksEnv = "SHARDQ_UI_BENCH_TASKS"

// BenchmarkQueuePage times a queue's page as its first visitor gets it: a fresh Handler,
// so each render waits for the queue's first Stats pass (every pending row of the lap)
// and its peek. The tasks are due 2 to 19 minutes ahead in the default 20-minute lap:
// Stats reads rows up to one lap ahead, so tasks due further out would cost the page
// nothing. Nothing consumes them while it runs.
func BenchmarkQueuePage(b *testing.B) {
	n := 10000
	if v := os.Getenv(benchTasksEnv); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err, benchTasksEnv)
	}
	ctx := context.Background()
	s := cassandratest.SchemaSession(b)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "big"})
	require.NoError(b, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(b, err)
	const batch = 5000
	start, span := time.Now().Add(2*time.Minute), q.Layout().Lap()-3*time.Minute
	require.NoError(b, fanout.Each((n+batch-1)/batch, 4, func(i int) error {
		tasks := make([]producer.Task, 0, batch)
		for j := i * batch; j < min(n, (i+1)*batch); j++ {
			tasks = append(tasks, producer.Task{Queue: q.Name, Payload: []byte(`{"n":` + strconv.Itoa(j) + `}`),
				DueAt: start.Add(span * time.Duration(j) / time.Duration(n))})
		}
		_, err := p.ScheduleTasks(ctx, tasks)
		return err
	}))
	b.ResetTimer()
	for b.Loop() {
		h, err := New(cassandratest.Driver(s), Config{})
		require.NoError(b, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queues/big", nil))
		h.Close()
		require.Equal(b, http.StatusOK, rec.Code)
		require.Contains(b, rec.Body.String(), `<td id="total-scheduled">`+strconv.Itoa(n)+`</td>`, "every task is counted")
	}
	b.ReportMetric(float64(n), "tasks")
}
