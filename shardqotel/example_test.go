package shardqotel_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqotel"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// Example wires the OpenTelemetry SDK to a producer and a worker: the task scheduled
// while a request's span is open is handled in a span of the same trace, and the
// worker's events are counted as metrics. A service exports to its collector instead
// (sdktrace.WithBatcher(otlptracegrpc.New(...)), sdkmetric.NewPeriodicReader(...)),
// usually through otel.SetTracerProvider and otel.SetMeterProvider, which New defaults to.
func Example() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "emails"}); err != nil {
		panic(err)
	}

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	tel, err := shardqotel.New(shardqotel.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		panic(err)
	}

	p, err := producer.New(d, producer.Config{Middleware: tel.Middleware})
	if err != nil {
		panic(err)
	}
	reqCtx, request := tp.Tracer("app").Start(ctx, "POST /signup")
	if _, err := p.ScheduleTask(reqCtx, producer.Task{Queue: "emails", Payload: []byte("welcome alice")}); err != nil {
		panic(err)
	}
	request.End()

	handled := make(chan struct{})
	w, err := worker.New(d, worker.Config{Queue: "emails", Observer: tel,
		Handler: tel.Handler(worker.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
			fmt.Printf("sending %s (traceparent header set: %t)\n", t.Payload, t.Headers["traceparent"] != "")
			close(handled)
			return nil
		}))})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	<-handled
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil { // waits for the handler's span to end, and acks
		panic(err)
	}

	trace := request.SpanContext().TraceID()
	for _, s := range spans.GetSpans() {
		fmt.Printf("span %q (%s), in the request's trace: %t\n", s.Name, s.SpanKind, s.SpanContext.TraceID() == trace)
	}
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "shardq.tasks.acked" {
			fmt.Printf("%s: %d\n", m.Name, sum.DataPoints[0].Value)
		}
	}
	// Output:
	// sending welcome alice (traceparent header set: true)
	// span "send emails" (producer), in the request's trace: true
	// span "POST /signup" (internal), in the request's trace: true
	// span "process emails" (consumer), in the request's trace: true
	// shardq.tasks.acked: 1
}
