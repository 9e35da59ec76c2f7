package shardqtype

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// TaskState is where a task is in its life.
type TaskState int

const (
	// TaskScheduled: waiting for its due time, never delivered since it was scheduled
	// or replayed.
	TaskScheduled TaskState = iota + 1
	// TaskInFlight: delivered and leased until TaskInfo.Deadline.
	TaskInFlight
	// TaskRetrying: delivered before and due again at TaskInfo.DueAt, after a retry or
	// an expired lease.
	TaskRetrying
	// TaskDead: out of attempts, kept in the queue's dead letters.
	TaskDead
	// TaskCompleted: acked, and kept for the queue's CompletedRetention.
	TaskCompleted
)

func (s TaskState) String() string {
	switch s {
	case TaskScheduled:
		return "scheduled"
	case TaskInFlight:
		return "in_flight"
	case TaskRetrying:
		return "retrying"
	case TaskDead:
		return "dead"
	case TaskCompleted:
		return "completed"
	}
	return fmt.Sprintf("TaskState(%d)", int(s))
}

// TaskInfo is a task as read back: the one row type of package inspect's Task, TaskByKey,
// Peek and DeadLetters. A field a reader cannot know is left zero, as said below.
type TaskInfo struct {
	ID    uuid.UUID
	Queue string
	// Key is the task's unique key, if it has one. Only a lookup by ID or key reads it.
	Key   string
	State TaskState
	// DueAt is when a scheduled task is due, or when a retrying one is due again.
	DueAt    time.Time
	Priority int
	// Attempt counts deliveries since the task was scheduled or replayed.
	Attempt int
	// Token counts every delivery of the task ever: the fencing token of its latest one.
	Token int64
	// Timeout is how long each delivery's lease lasts. Like the row fields below, it is
	// zero for a finished task, unless read from the dead letters.
	Timeout time.Duration
	// Deadline is when the lease of a task in flight ends.
	Deadline time.Time
	// VisibleAt is when the row of a pending, in-flight or retrying task becomes (or
	// became) visible to consumers: its place among due tasks of its priority.
	VisibleAt time.Time
	// PartitionKey is the partition of that row.
	PartitionKey string
	// LastError is the error a dead task died of.
	LastError string
	// FinishedAt is when a dead or completed task finished.
	FinishedAt time.Time
	// DeadLetterID names the dead letter of a task read from a queue's dead letters: pass
	// it to producer.ReplayDeadLetter or PurgeDeadLetter, or as the cursor of the next page.
	DeadLetterID uuid.UUID
	// Payload is the task's payload, for a task pending or in flight, or one read from the
	// dead letters.
	Payload []byte
	// Headers are the task's headers (producer.Task.Headers), read along with its Payload;
	// nil when it has none.
	Headers map[string]string
	// Kind is the task's kind (producer.Task.Kind, shardq.Args), read along with its
	// Payload; empty when it has none.
	Kind string
}

var (
	// ErrTaskNotFound means no task of that ID or key is pending, in flight, retrying,
	// dead, or completed within its queue's retention.
	ErrTaskNotFound = errors.New("shardq: task not found")
	// ErrTaskInFlight is matched by *TaskInFlightError.
	ErrTaskInFlight = errors.New("shardq: task in flight")
)

// TaskInFlightError is returned by Cancel and Reschedule for a task that a consumer holds
// right now. It matches ErrTaskInFlight.
type TaskInFlightError struct {
	ID       uuid.UUID
	Token    int64
	Deadline time.Time
}

func (e *TaskInFlightError) Error() string {
	return fmt.Sprintf("shardq: task %s is in flight (delivery %d, leased until %s)", e.ID, e.Token, e.Deadline.UTC().Format(time.RFC3339Nano))
}

func (e *TaskInFlightError) Unwrap() error { return ErrTaskInFlight }
