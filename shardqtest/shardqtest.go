// Package shardqtest helps test code that uses shardq: run a handler on a task built in
// memory (NewTask, Work), assert what a queue holds (RequireScheduled,
// RequireScheduledMany), and give each test a keyspace of its own on a real Cassandra
// (Driver).
//
// Handlers are plain functions of a task, so they are tested without a cluster. What a
// producer scheduled is read back from Cassandra, not from a mock: a test then checks the
// rows a worker would find.
package shardqtest

import (
	"context"
	"testing"
	"time"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// Driver returns a driver on a keyspace for this test alone, with shardq's schema applied
// and no queue in it; its session (of github.com/gocql/gocql) is closed when the test
// ends. Call shardq.CreateQueue on it as the code under test expects.
//
// The cluster is found once per test binary: the hosts in SHARDQ_CASSANDRA_HOSTS
// (host or host:port, comma-separated), else a node answering on 127.0.0.1:9042, else a
// cassandra:5.0 container started through testcontainers-go where a Docker engine
// answers; otherwise the test fails, since tests that skip prove nothing. Keyspaces are
// made with replication factor SHARDQ_CASSANDRA_RF (default 1). They are reused across
// the tests of one binary, emptied in between, because making one costs ten schema
// changes; tests that use Driver may run in parallel.
func Driver(t testing.TB) *shardqtype.Driver {
	t.Helper()
	return cassandratest.Driver(cassandratest.SchemaSession(t))
}

// NewTask returns a task of queue as a worker hands it to a handler on its first
// delivery: a new task ID, due now, Attempt and Token 1, leased for
// shardqtype.DefaultTimeout from now. Set any field before calling Work: Attempt to test the
// last delivery before the dead letters, Deadline to test a handler that outlives its
// lease, Series for an occurrence of a recurring series, Headers for a task scheduled
// with headers.
//
// The task exists in memory only: a consumer given it (AckTasks, Extend, Retry,
// DeadLetter) returns an error matching shardqtype.ErrInvalid, as for any task that
// AcquireTasks did not deliver, and writes nothing.
func NewTask(queue string, payload []byte) *consumer.Task {
	now := time.Now()
	return &consumer.Task{
		ID:      taskid.New(now, queue),
		Queue:   queue,
		Payload: payload,
		// Read back from Cassandra, due times carry milliseconds, in UTC.
		DueAt:    now.UTC().Truncate(time.Millisecond),
		Attempt:  1,
		Deadline: now.Add(shardqtype.DefaultTimeout),
		Timeout:  shardqtype.DefaultTimeout,
		Token:    1,
	}
}

// Work runs h on task as a worker does, without a cluster, and returns what h returns: nil
// is what a worker acks; an error is what it retries (or dead-letters from
// worker.Config.MaxAttempts). h's context ends at task.Deadline, when a worker's lease
// would end. A panic in h is not recovered, so the test fails with its stack; a worker
// would count it as a failure.
//
// Work returns an error matching shardqtype.ErrInvalid, without calling h, when h or task is
// nil or task.Deadline is zero or has passed: a worker does not start a task whose lease
// is over.
func Work(ctx context.Context, h worker.Handler, task *consumer.Task) error {
	switch {
	case h == nil:
		return defaults.Invalid("h", "is nil")
	case task == nil:
		return defaults.Invalid("task", "is nil")
	case task.Deadline.IsZero():
		return defaults.Invalid("task.Deadline", "is zero: make tasks with NewTask")
	case !time.Now().Before(task.Deadline):
		return defaults.Invalid("task.Deadline", "%v has passed: a worker would not start the task", task.Deadline)
	}
	ctx, cancel := context.WithDeadline(ctx, task.Deadline)
	defer cancel()
	return h.Handle(ctx, task)
}
