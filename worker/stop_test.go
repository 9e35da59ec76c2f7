package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// stuckHandler ignores its context: every task it gets holds it until release; started
// closes when the first begins.
func stuckHandler(t *testing.T) (h worker.Handler, started <-chan struct{}, release func()) {
	start, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = sync.OnceFunc(func() { close(free) })
	t.Cleanup(release) // a failed test must not leave the handler hanging
	return worker.HandlerFunc(func(context.Context, *consumer.Task) error {
		once.Do(func() { close(start) })
		<-free
		return nil
	}), start, release
}

// receive waits for what returns on c, failing the test if nothing comes in 10 s.
func receive(t *testing.T, c <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// TestStopReturnsWhenItsContextEnds stops a worker whose handler ignores its context:
// Stop returns when its context ends, saying that one handler is still running.
func TestStopReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	e.schedule(1)
	h, started, release := stuckHandler(t)
	w := e.worker(worker.Config{Concurrency: 1, Handler: h})
	require.NoError(t, w.Start(context.Background()))
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no task started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	select {
	case err := <-stopped:
		var se *worker.StopError
		require.ErrorAs(t, err, &se)
		require.Equal(t, 1, se.Running)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return when its context ended")
	}
	release()
	stop(t, w) // the handler returned: the worker stops completely
}

// TestRunUntilReturnsByDeadlineDespiteStuckHandler runs a worker whose handler ignores
// its context: RunUntil returns by its deadline all the same, and says so.
func TestRunUntilReturnsByDeadlineDespiteStuckHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	e.schedule(1)
	h, started, release := stuckHandler(t)
	w := e.worker(worker.Config{Concurrency: 1, Handler: h})
	deadline := time.Now().Add(3 * time.Second) // time for the handler to start
	ran := make(chan error, 1)
	go func() { ran <- w.RunUntil(context.Background(), deadline) }()
	select {
	case err := <-ran:
		// Timers fire a little after their time, more so on a loaded machine: allow for that.
		require.LessOrEqual(t, time.Since(deadline), 100*time.Millisecond, "returned after the deadline")
		var se *worker.StopError
		require.ErrorAs(t, err, &se)
		require.Equal(t, 1, se.Running)
	case <-time.After(time.Until(deadline) + 5*time.Second):
		t.Fatal("RunUntil did not return by its deadline")
	}
	select {
	case <-started:
	default:
		t.Fatal("the handler never started")
	}
	release()
	stop(t, w)
}

// TestRunUntilConcurrentWithStart calls RunUntil and Start on a worker at once: one of
// them runs it, the other fails cleanly, and the race detector finds nothing. A run is
// given 2 s: a worker's first poll reads every partition of its lap, which a node loaded
// by the rest of the suite took longer than half a second to answer, and RunUntil then
// rightly reported the stop it cut off at its deadline.
func TestRunUntilConcurrentWithStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	h := worker.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })
	for range 5 {
		w := e.worker(worker.Config{Handler: h})
		begin := make(chan struct{})
		startErr, runErr := make(chan error, 1), make(chan error, 1)
		go func() { <-begin; startErr <- w.Start(context.Background()) }()
		go func() { <-begin; runErr <- w.RunUntil(context.Background(), time.Now().Add(2*time.Second)) }()
		close(begin)
		if err := receive(t, startErr, "Start"); err == nil {
			require.ErrorContains(t, receive(t, runErr, "RunUntil"), "already started")
			stop(t, w)
		} else {
			require.ErrorContains(t, err, "already started")
			require.NoError(t, receive(t, runErr, "RunUntil"))
		}
	}
}

// TestStopConcurrentWithStart calls Stop, with a context already ended, at the same time
// as Start: Stop either finds the worker not started or stops it hard; it never panics.
func TestStopConcurrentWithStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardqtype.QueueConfig{ShardCount: 1})
	h := worker.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		w := e.worker(worker.Config{Handler: h})
		begin := make(chan struct{})
		startErr, stopErr := make(chan error, 1), make(chan error, 1)
		go func() { <-begin; startErr <- w.Start(context.Background()) }()
		go func() { <-begin; stopErr <- w.Stop(ended) }()
		close(begin)
		require.NoError(t, receive(t, startErr, "Start"))
		if err := receive(t, stopErr, "Stop"); err != nil && !errors.Is(err, context.Canceled) {
			require.ErrorContains(t, err, "not started")
		}
		stop(t, w)
	}
}
