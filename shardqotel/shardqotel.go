// Package shardqotel traces shardq tasks and exports shardq's events as metrics with
// OpenTelemetry. It is the only package that imports OpenTelemetry: the core packages
// never do, so programs that do not use it do not link it.
//
// One trace runs from the call that scheduled a task to every run of its handler,
// minutes later and in another process if need be: the producer's middleware starts a
// span per ScheduleTask or ScheduleTasks call and writes its context into each task's
// headers (W3C trace context by default), and the handler wrapper starts each run's span
// as a child of it.
//
//	tel, err := shardqotel.New(shardqotel.Config{}) // the global providers; or set them
//	p, err := producer.New(cassandratest.Driver(session), producer.Config{Middleware: tel.Middleware})
//	w, err := worker.New(cassandratest.Driver(session), worker.Config{Queue: "emails", Handler: tel.Handler(h), Observer: tel})
package shardqotel

import (
	"context"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// ScopeName names the tracer and meter, as instrumentation scopes are named: by the
// package's import path.
const ScopeName = "github.com/shardq/shardq/shardqotel"

// System is the messaging.system attribute of every span and metric.
const System messagingconv.SystemAttr = "shardq"

// Attributes of shardq's own, beside the messaging semantic conventions'.
const (
	// AttrAttempt is a handler run's consumer.Task.Attempt: 1 on its first delivery.
	AttrAttempt = attribute.Key("shardq.task.attempt")
	// AttrPriority is the task's priority.
	AttrPriority = attribute.Key("shardq.task.priority")
	// AttrLateness is how long after its due time the handler run started, in seconds.
	AttrLateness = attribute.Key("shardq.task.lateness")
	// AttrPartitionOp is the step of a partition failure (shardqtype.PartitionFailed.Op).
	AttrPartitionOp = attribute.Key("shardq.partition.operation")
)

// Config configures a Telemetry.
type Config struct {
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes a span's context into task headers and reads it back. Defaults
	// to propagation.TraceContext{}, the W3C traceparent and tracestate headers, which
	// take about 70 bytes of a task's headers (and of its payload limit) with no
	// tracestate.
	Propagator propagation.TextMapPropagator
	// Clock tells the lateness of a handler run. Defaults to shardqtype.SystemClock{}.
	Clock shardqtype.Clock
}

// Telemetry traces scheduling (Middleware) and handling (Handler), and records shardq's
// events as metrics (Observe). It is safe for concurrent use.
type Telemetry struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	clock      shardqtype.Clock

	sent          messagingconv.ClientSentMessages
	consumed      messagingconv.ClientConsumedMessages
	process       messagingconv.ProcessDuration
	acked         metric.Int64Counter
	retried       metric.Int64Counter
	deadLettered  metric.Int64Counter
	leaseLost     metric.Int64Counter
	lateness      metric.Float64Histogram
	lockContended metric.Int64Counter
	lockWait      metric.Float64Histogram
	failures      metric.Int64Counter
}

// New makes a Telemetry and its metric instruments.
func New(cfg Config) (*Telemetry, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	if cfg.Clock == nil {
		cfg.Clock = shardqtype.SystemClock{}
	}
	m := cfg.MeterProvider.Meter(ScopeName)
	t := &Telemetry{tracer: cfg.TracerProvider.Tracer(ScopeName), propagator: cfg.Propagator, clock: cfg.Clock}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		var c metric.Int64Counter
		if err == nil {
			c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		var h metric.Float64Histogram
		if err == nil {
			h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
				metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
		}
		return h
	}
	t.acked = counter("shardq.tasks.acked", "{task}", "Tasks acked.")
	t.retried = counter("shardq.tasks.retried", "{task}", "Failed tasks scheduled to run again.")
	t.deadLettered = counter("shardq.tasks.dead_lettered", "{task}", "Tasks moved to the dead letters after their last attempt.")
	t.leaseLost = counter("shardq.leases.lost", "{task}", "Acks, retries or extensions that found the lease gone.")
	t.lateness = seconds("shardq.task.lateness", "Handler start minus the task's due time.")
	t.lockContended = counter("shardq.lock.contentions", "{partition}", "Partitions skipped because another consumer held the lock.")
	t.lockWait = seconds("shardq.lock.wait", "Time to take a partition's lock.")
	t.failures = counter("shardq.partition.failures", "{failure}", "Partitions that could not be read or written.")
	if err != nil {
		return nil, fmt.Errorf("shardqotel: %w", err)
	}
	if t.sent, err = messagingconv.NewClientSentMessages(m); err != nil {
		return nil, fmt.Errorf("shardqotel: %w", err)
	}
	if t.consumed, err = messagingconv.NewClientConsumedMessages(m); err != nil {
		return nil, fmt.Errorf("shardqotel: %w", err)
	}
	if t.process, err = messagingconv.NewProcessDuration(m); err != nil {
		return nil, fmt.Errorf("shardqotel: %w", err)
	}
	return t, nil
}

// Operation names (messaging.operation.name) of the spans and metrics.
const (
	opSchedule = "schedule"
	opAcquire  = "acquire"
	opHandle   = "handle"
)

// Middleware is a producer.Middleware (producer.Config.Middleware): each ScheduleTask or
// ScheduleTasks call gets a producer span, named "send <queue>", whose context goes into
// every task's headers, next to those the caller set. The span records the call's error;
// for a single task it names the task's ID. The tasks sent are counted in
// messaging.client.sent.messages.
func (t *Telemetry) Middleware(next producer.ScheduleFunc) producer.ScheduleFunc {
	return func(ctx context.Context, tasks []producer.Task) ([]uuid.UUID, error) {
		queue := queueOf(tasks)
		attrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(string(System)),
			semconv.MessagingOperationTypeKey.String(string(messagingconv.OperationTypeSend)),
			semconv.MessagingOperationName(opSchedule)}
		if queue != "" {
			attrs = append(attrs, semconv.MessagingDestinationName(queue))
		}
		if len(tasks) > 1 {
			attrs = append(attrs, semconv.MessagingBatchMessageCount(len(tasks)))
		}
		ctx, span := t.tracer.Start(ctx, spanName("send", queue), trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attrs...))
		defer span.End()

		carrier := propagation.MapCarrier{}
		t.propagator.Inject(ctx, carrier)
		if len(carrier) > 0 {
			// The caller's tasks and their headers stay as they are: copies go on.
			traced := make([]producer.Task, len(tasks))
			for i, task := range tasks {
				h := make(map[string]string, len(task.Headers)+len(carrier))
				maps.Copy(h, task.Headers)
				maps.Copy(h, carrier)
				task.Headers = h
				traced[i] = task
			}
			tasks = traced
		}
		ids, err := next(ctx, tasks)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(ids) == 1 {
			span.SetAttributes(semconv.MessagingMessageID(ids[0].String()))
		}
		counts := map[string]int64{}
		for _, task := range tasks {
			counts[task.Queue]++
		}
		for q, n := range counts {
			extra := []attribute.KeyValue{t.sent.AttrDestinationName(q)}
			if err != nil {
				extra = append(extra, t.sent.AttrErrorType(messagingconv.ErrorTypeAttr(errorType(err))))
			}
			t.sent.Add(ctx, n, opSchedule, System, extra...)
		}
		return ids, err
	}
}

// Handler wraps h so that each run gets a consumer span, named "process <queue>", a child
// of the span that scheduled the task when its headers carry one (so one trace holds the
// scheduling call and every attempt), with the task's queue, ID, attempt, priority and
// lateness as attributes. The span records the handler's error, or its panic, which goes
// on up to the worker as before.
func (t *Telemetry) Handler(h worker.Handler) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) (err error) {
		parent := t.propagator.Extract(ctx, propagation.MapCarrier(task.Headers))
		ctx, span := t.tracer.Start(parent, spanName("process", task.Queue), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				semconv.MessagingSystemKey.String(string(System)),
				semconv.MessagingOperationTypeKey.String(string(messagingconv.OperationTypeProcess)),
				semconv.MessagingOperationName(opHandle),
				semconv.MessagingDestinationName(task.Queue),
				semconv.MessagingMessageID(task.ID.String()),
				AttrAttempt.Int(task.Attempt),
				AttrPriority.Int(task.Priority),
				AttrLateness.Float64(t.clock.Now().Sub(task.DueAt).Seconds()),
			))
		defer func() {
			if p := recover(); p != nil {
				span.RecordError(fmt.Errorf("panic: %v", p), trace.WithStackTrace(true))
				span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", p))
				span.End()
				panic(p) // the worker recovers it, counts it and retries the task
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		return h.Handle(ctx, task)
	})
}

// Observe records e in the metrics: tasks leased (messaging.client.consumed.messages),
// handler runs (messaging.process.duration, with error.type "panic" or the error's Go type
// when they failed), acks, retries, dead letters, lost leases, lateness, lock waits and
// contention, and partition failures (shardq.*), each with the task's queue as
// messaging.destination.name. Pass the Telemetry as the Observer of workers and
// consumers.
func (t *Telemetry) Observe(ctx context.Context, e shardqtype.Event) {
	queue := func(q string) metric.MeasurementOption {
		return metric.WithAttributes(semconv.MessagingSystemKey.String(string(System)), semconv.MessagingDestinationName(q))
	}
	switch e := e.(type) {
	case shardqtype.BatchAcquired:
		t.consumed.Add(ctx, int64(e.Size), opAcquire, System, t.consumed.AttrDestinationName(e.Queue))
		t.lockWait.Record(ctx, e.LockWait.Seconds(), queue(e.Queue))
	case shardqtype.LockContended:
		t.lockContended.Add(ctx, 1, queue(e.Queue))
	case shardqtype.Acked:
		t.acked.Add(ctx, int64(e.Count), queue(e.Queue))
	case shardqtype.LeaseLost:
		t.leaseLost.Add(ctx, 1, queue(e.Queue))
	case shardqtype.TaskStarted:
		t.lateness.Record(ctx, max(e.Lateness, 0).Seconds(), queue(e.Queue))
	case shardqtype.TaskFinished:
		attrs := []attribute.KeyValue{semconv.MessagingDestinationName(e.Queue)}
		switch {
		case e.Panicked:
			attrs = append(attrs, semconv.ErrorTypeKey.String("panic"))
		case e.Err != nil:
			attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(e.Err)))
		}
		t.process.Record(ctx, e.Duration.Seconds(), opHandle, System, attrs...)
	case shardqtype.Retried:
		t.retried.Add(ctx, 1, queue(e.Queue))
	case shardqtype.DeadLettered:
		t.deadLettered.Add(ctx, 1, queue(e.Queue))
	case shardqtype.PartitionFailed:
		t.failures.Add(ctx, 1, metric.WithAttributes(semconv.MessagingSystemKey.String(string(System)),
			semconv.MessagingDestinationName(e.Queue), AttrPartitionOp.String(e.Op)))
	}
}

// queueOf is the queue of tasks, or "" when they name several.
func queueOf(tasks []producer.Task) string {
	if len(tasks) == 0 {
		return ""
	}
	for _, t := range tasks[1:] {
		if t.Queue != tasks[0].Queue {
			return ""
		}
	}
	return tasks[0].Queue
}

// spanName is "<operation> <queue>", as the messaging conventions name spans, or the
// operation alone when there is no one queue.
func spanName(op, queue string) string {
	if queue == "" {
		return op
	}
	return op + " " + queue
}

// errorType is err's error.type: its Go type, which keeps the attribute's values few.
func errorType(err error) string {
	return fmt.Sprintf("%T", err)
}

var _ shardqtype.Observer = (*Telemetry)(nil)
