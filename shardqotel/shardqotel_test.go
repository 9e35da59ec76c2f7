package shardqotel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqotel"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// newQueue makes a queue with a unique name in a keyspace of its own, so that
// in-process wake-ups of parallel tests do not cross.
func newQueue(t *testing.T, ks string) shardqtype.QueueConfig {
	t.Helper()
	q, err := shardq.CreateQueue(context.Background(), cassandratest.Driver(cassandratest.SessionFor(t, ks)), shardqtype.QueueConfig{
		Name: "q" + strings.ReplaceAll(uuid.NewString()[:8], "-", ""), BucketCount: 60, BucketDuration: time.Second,
		ShardCount: 2, DefaultTimeout: 10 * time.Second})
	require.NoError(t, err)
	return q
}

// endedSpan is a span as the handler process reports it on its standard output.
type endedSpan struct {
	Name, TraceID, SpanID, ParentSpanID, Kind, Status string
	Attrs                                             map[string]string
	Events                                            []string
}

func report(s sdktrace.ReadOnlySpan) endedSpan {
	e := endedSpan{Name: s.Name(), TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
		ParentSpanID: s.Parent().SpanID().String(), Kind: s.SpanKind().String(), Status: s.Status().Code.String(),
		Attrs: map[string]string{}}
	for _, kv := range s.Attributes() {
		e.Attrs[string(kv.Key)] = kv.Value.String()
	}
	for _, ev := range s.Events() {
		e.Events = append(e.Events, ev.Name)
	}
	return e
}

// printer is the SDK's in-memory span recorder that also prints each span as it ends,
// as a JSON line, for the test that started this process.
type printer struct {
	*tracetest.SpanRecorder
	mu sync.Mutex
}

func (p *printer) OnEnd(s sdktrace.ReadOnlySpan) {
	p.SpanRecorder.OnEnd(s)
	b, _ := json.Marshal(report(s))
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf("span %s\n", b)
}

const (
	handlerKeyspaceEnv = "SHARDQ_TEST_OTEL_KEYSPACE"
	handlerQueueEnv    = "SHARDQ_TEST_OTEL_QUEUE"
)

// TestHandlerProcess is the worker process of TestTraceAcrossProcesses: a worker whose
// handler, traced by shardqotel with the SDK, fails a task's first attempt and acks the
// second, printing "ready" once started and each span as it ends. It stops when its
// standard input closes. Run on its own it has nothing to do and returns.
func TestHandlerProcess(t *testing.T) {
	ks := os.Getenv(handlerKeyspaceEnv)
	if ks == "" {
		return
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(&printer{SpanRecorder: tracetest.NewSpanRecorder()}))
	tel, err := shardqotel.New(shardqotel.Config{TracerProvider: tp})
	require.NoError(t, err)
	w, err := worker.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), worker.Config{Queue: os.Getenv(handlerQueueEnv),
		MaxIdleInterval: 200 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }, Observer: tel,
		Handler: tel.Handler(worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if task.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}))})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	require.NoError(t, w.Stop(ctx))
}

// A task scheduled inside a span is handled by a worker in another process: the span of
// each of its two runs (the first fails, the second succeeds) belongs to the trace of
// the span it was scheduled in, as a child of the producer's span, and names the task,
// its queue, attempt, priority and lateness.
func TestTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	q := newQueue(t, ks)
	child := exec.Command(os.Args[0], "-test.run=^TestHandlerProcess$", "-test.count=1")
	child.Env = append(os.Environ(), handlerKeyspaceEnv+"="+ks, handlerQueueEnv+"="+q.Name,
		cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(t), ","))
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the worker process ended")
			return line
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no word from the worker process in 30s")
		}
		return ""
	}
	require.Equal(t, "ready", next())

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := shardqotel.New(shardqotel.Config{TracerProvider: tp})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), producer.Config{Middleware: tel.Middleware})
	require.NoError(t, err)
	ctx, request := tp.Tracer("app").Start(context.Background(), "request")
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("p"), Priority: 4})
	require.NoError(t, err)
	request.End()

	ended := rec.Ended()
	require.Len(t, ended, 2)
	send := ended[0]
	require.Equal(t, "send "+q.Name, send.Name())
	require.Equal(t, trace.SpanKindProducer, send.SpanKind())
	require.Equal(t, request.SpanContext().SpanID(), send.Parent().SpanID())
	require.Contains(t, send.Attributes(), attribute.String("messaging.message.id", id.String()))
	require.Contains(t, send.Attributes(), attribute.String("messaging.destination.name", q.Name))
	require.Contains(t, send.Attributes(), attribute.String("messaging.system", "shardq"))

	var runs []endedSpan
	for len(runs) < 2 {
		line := next()
		if !strings.HasPrefix(line, "span ") {
			continue
		}
		var s endedSpan
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "span ")), &s))
		runs = append(runs, s)
	}
	for i, s := range runs {
		require.Equal(t, "process "+q.Name, s.Name)
		require.Equal(t, "consumer", s.Kind)
		require.Equal(t, request.SpanContext().TraceID().String(), s.TraceID, "one trace from the request to the handler")
		require.Equal(t, send.SpanContext().SpanID().String(), s.ParentSpanID, "a child of the producer's span")
		require.Equal(t, id.String(), s.Attrs["messaging.message.id"])
		require.Equal(t, q.Name, s.Attrs["messaging.destination.name"])
		require.Equal(t, fmt.Sprint(i+1), s.Attrs["shardq.task.attempt"])
		require.Equal(t, "4", s.Attrs["shardq.task.priority"])
		require.Contains(t, s.Attrs, "shardq.task.lateness")
	}
	require.Equal(t, "Error", runs[0].Status)
	require.Equal(t, []string{"exception"}, runs[0].Events, "the error is recorded")
	require.Equal(t, "Unset", runs[1].Status)
	require.NotEqual(t, runs[0].SpanID, runs[1].SpanID, "a span per attempt")

	require.NoError(t, stdin.Close())
	for range lines {
	}
	require.NoError(t, child.Wait())
}

// Each run of a task gets its own span, and a panic is recorded on the span of its run
// (status, message and stack) and still reaches the worker, which counts it and retries
// the task: a task that panics, then fails, then succeeds leaves three spans. A task
// scheduled outside any span starts a trace of its own.
func TestHandlerSpans(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	q := newQueue(t, ks)
	s := cassandratest.SessionFor(t, ks)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := shardqotel.New(shardqotel.Config{TracerProvider: tp})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Middleware: tel.Middleware})
	require.NoError(t, err)
	plain, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)

	done := make(chan uuid.UUID, 2)
	w, err := worker.New(cassandratest.Driver(s), worker.Config{Queue: q.Name, MaxIdleInterval: 200 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 },
		Handler: tel.Handler(worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if string(task.Payload) == "flaky" {
				switch task.Attempt {
				case 1:
					panic("boom")
				case 2:
					return errors.New("not yet")
				}
			}
			done <- task.ID
			return nil
		}))})
	require.NoError(t, err)
	ctx := context.Background()
	flaky, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("flaky")})
	require.NoError(t, err)
	untraced, err := plain.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("plain")})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	for range 2 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("tasks not handled")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
	require.Equal(t, uint64(1), w.Stats().Panicked, "the panic reached the worker")

	var send sdktrace.ReadOnlySpan
	byTask := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			send = s
		case trace.SpanKindConsumer:
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.message.id" {
					byTask[kv.Value.AsString()] = append(byTask[kv.Value.AsString()], s)
				}
			}
		}
	}
	require.NotNil(t, send)
	runs := byTask[flaky.String()]
	require.Len(t, runs, 3, "a span per attempt")
	for i, s := range runs {
		require.Equal(t, send.SpanContext().TraceID(), s.SpanContext().TraceID())
		require.Equal(t, send.SpanContext().SpanID(), s.Parent().SpanID())
		require.Contains(t, s.Attributes(), attribute.Int("shardq.task.attempt", i+1))
	}
	require.Equal(t, codes.Error, runs[0].Status().Code)
	require.Equal(t, "panic: boom", runs[0].Status().Description)
	require.Len(t, runs[0].Events(), 1)
	var stack string
	for _, kv := range runs[0].Events()[0].Attributes {
		if kv.Key == "exception.stacktrace" {
			stack = kv.Value.AsString()
		}
	}
	require.Contains(t, stack, "shardqotel_test.TestHandlerSpans", "the stack of the panic")
	require.Equal(t, codes.Error, runs[1].Status().Code)
	require.Equal(t, "not yet", runs[1].Status().Description)
	require.Equal(t, codes.Unset, runs[2].Status().Code)

	other := byTask[untraced.String()]
	require.Len(t, other, 1)
	require.False(t, other[0].Parent().IsValid(), "no trace in its headers: a root span")
	require.NotEqual(t, send.SpanContext().TraceID(), other[0].SpanContext().TraceID())
}

// The Observer's events become OpenTelemetry metrics: tasks scheduled and delivered under
// the messaging conventions' names, handler runs by outcome, acks, retries, dead letters,
// lateness, lock contention and partition failures.
func TestMetrics(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	q := newQueue(t, ks)
	s := cassandratest.SessionFor(t, ks)
	reader := sdkmetric.NewManualReader()
	tel, err := shardqotel.New(shardqotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Middleware: tel.Middleware})
	require.NoError(t, err)
	ctx := context.Background()

	// A partition whose lock another holds is skipped, and taken once it is free.
	held, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Payload: []byte("locked")})
	require.NoError(t, err)
	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Observer: tel})
	require.NoError(t, err)
	locker, err := lock.New(cassandratest.Driver(s), lock.Config{})
	require.NoError(t, err)
	l := q.Layout()
	lk, err := locker.Acquire(ctx, l.Key(l.Bucket(time.Now()), l.ShardFor(held)))
	require.NoError(t, err)
	got, err := c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, lk.Release(ctx))
	require.Eventually(t, func() bool {
		got, err = c.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		return len(got) == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, c.AckTasks(ctx, got...))
	tel.Observe(ctx, shardqtype.PartitionFailed{Queue: q.Name, PartitionKey: "k", Op: "peek", Err: errors.New("down")})

	// Two tasks succeed, one after a retry; one fails both its attempts and dies.
	_, err = p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}, {Queue: q.Name, Payload: []byte("flaky")},
		{Queue: q.Name, Payload: []byte("doomed")}})
	require.NoError(t, err)
	dead := make(chan struct{})
	w, err := worker.New(cassandratest.Driver(s), worker.Config{Queue: q.Name, MaxIdleInterval: 200 * time.Millisecond, MaxAttempts: 2,
		Backoff: func(int) time.Duration { return 0 },
		Observer: shardqtype.ObserverFunc(func(ctx context.Context, e shardqtype.Event) {
			tel.Observe(ctx, e)
			if _, ok := e.(shardqtype.DeadLettered); ok {
				close(dead)
			}
		}),
		Handler: worker.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if string(task.Payload) == "doomed" || string(task.Payload) == "flaky" && task.Attempt == 1 {
				return errors.New("failed")
			}
			return nil
		})})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	select {
	case <-dead:
	case <-time.After(30 * time.Second):
		t.Fatal("never dead-lettered")
	}
	require.Eventually(t, func() bool { return w.Stats().Acked == 2 }, 10*time.Second, 10*time.Millisecond)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	sums := map[string]int64{}
	counts := map[string]uint64{}
	failedRuns := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, shardqotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					v, _ := dp.Attributes.Value("messaging.destination.name")
					require.Equal(t, q.Name, v.AsString(), m.Name)
					sums[m.Name] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					counts[m.Name] += dp.Count
					if e, ok := dp.Attributes.Value("error.type"); ok {
						failedRuns[e.AsString()] += dp.Count
					}
				}
			}
		}
	}
	require.Equal(t, map[string]int64{
		"messaging.client.sent.messages":     4,
		"messaging.client.consumed.messages": 6, // 1 by the consumer, 5 runs by the worker
		"shardq.tasks.acked":                 3,
		"shardq.tasks.retried":               2,
		"shardq.tasks.dead_lettered":         1,
		"shardq.lock.contentions":            1,
		"shardq.partition.failures":          1,
	}, sums)
	require.Equal(t, uint64(5), counts["messaging.process.duration"])
	require.Equal(t, map[string]uint64{"*errors.errorString": 3}, failedRuns)
	require.Equal(t, uint64(5), counts["shardq.task.lateness"])
	require.GreaterOrEqual(t, counts["shardq.lock.wait"], uint64(2))
}
