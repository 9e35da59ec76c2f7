// Package shardqprom exposes shardq's events as Prometheus metrics. It is the only
// package that imports the Prometheus client: the core packages never do, so programs
// that do not use it do not link it.
//
//	obs, err := shardqprom.New(prometheus.DefaultRegisterer, shardqprom.Config{})
//	w, err := worker.New(cassandratest.Driver(session), worker.Config{Queue: "emails", Handler: h, Observer: obs})
package shardqprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardq/shardq/shardqtype"
)

// DefaultNamespace is Config.Namespace's default.
const DefaultNamespace = "shardq"

// Config configures an Observer.
type Config struct {
	// Namespace prefixes every metric name. Defaults to DefaultNamespace.
	Namespace string
}

// Observer is a shardqtype.Observer that records events in Prometheus collectors, labelled
// by queue (and outcome where there is one).
type Observer struct {
	acquired      *prometheus.CounterVec
	batchSize     *prometheus.HistogramVec
	lockWait      *prometheus.HistogramVec
	lockContended *prometheus.CounterVec
	acked         *prometheus.CounterVec
	leaseLost     *prometheus.CounterVec
	started       *prometheus.CounterVec
	lateness      *prometheus.HistogramVec
	finished      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	retried       *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
}

// New makes an Observer and registers its collectors with reg.
func New(reg prometheus.Registerer, cfg Config) (*Observer, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	ns := cfg.Namespace
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, append([]string{"queue"}, labels...))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, append([]string{"queue"}, labels...))
	}
	seconds := prometheus.ExponentialBuckets(0.001, 2, 16) // 1 ms to ~33 s
	o := &Observer{
		acquired:      counter("tasks_acquired_total", "Tasks leased by consumers."),
		batchSize:     histogram("acquire_batch_size", "Tasks leased from one partition in one swap.", prometheus.ExponentialBuckets(1, 2, 11)),
		lockWait:      histogram("lock_wait_seconds", "Time to take a shard lock.", seconds),
		lockContended: counter("lock_contended_total", "Shards skipped because another consumer held the lock."),
		acked:         counter("tasks_acked_total", "Tasks acked."),
		leaseLost:     counter("leases_lost_total", "Acks, retries or extensions that found the lease gone."),
		started:       counter("tasks_started_total", "Handlers started."),
		lateness:      histogram("task_lateness_seconds", "Handler start minus the task's due time.", seconds),
		finished:      counter("tasks_finished_total", "Handlers finished, by outcome (success, error, panic).", "outcome"),
		duration:      histogram("task_duration_seconds", "Handler run time, by outcome.", seconds, "outcome"),
		retried:       counter("tasks_retried_total", "Failed tasks scheduled to run again."),
		deadLettered:  counter("tasks_dead_lettered_total", "Tasks moved to the dead letters after their last attempt."),
	}
	for _, c := range []prometheus.Collector{o.acquired, o.batchSize, o.lockWait, o.lockContended, o.acked, o.leaseLost,
		o.started, o.lateness, o.finished, o.duration, o.retried, o.deadLettered} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Observe records e.
func (o *Observer) Observe(_ context.Context, e shardqtype.Event) {
	switch e := e.(type) {
	case shardqtype.BatchAcquired:
		o.acquired.WithLabelValues(e.Queue).Add(float64(e.Size))
		o.batchSize.WithLabelValues(e.Queue).Observe(float64(e.Size))
		o.lockWait.WithLabelValues(e.Queue).Observe(e.LockWait.Seconds())
	case shardqtype.LockContended:
		o.lockContended.WithLabelValues(e.Queue).Inc()
	case shardqtype.Acked:
		o.acked.WithLabelValues(e.Queue).Add(float64(e.Count))
	case shardqtype.LeaseLost:
		o.leaseLost.WithLabelValues(e.Queue).Inc()
	case shardqtype.TaskStarted:
		o.started.WithLabelValues(e.Queue).Inc()
		o.lateness.WithLabelValues(e.Queue).Observe(e.Lateness.Seconds())
	case shardqtype.TaskFinished:
		outcome := "success"
		switch {
		case e.Panicked:
			outcome = "panic"
		case e.Err != nil:
			outcome = "error"
		}
		o.finished.WithLabelValues(e.Queue, outcome).Inc()
		o.duration.WithLabelValues(e.Queue, outcome).Observe(e.Duration.Seconds())
	case shardqtype.Retried:
		o.retried.WithLabelValues(e.Queue).Inc()
	case shardqtype.DeadLettered:
		o.deadLettered.WithLabelValues(e.Queue).Inc()
	}
}
