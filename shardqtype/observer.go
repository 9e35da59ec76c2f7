package shardqtype

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Observer receives events from consumers and workers, for metrics and tracing. Observe
// is called synchronously on the path that caused the event, from many goroutines at
// once: keep it cheap and safe for concurrent use.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Event is one of the event types below; switch on its type.
type Event interface{ isEvent() }

// BatchAcquired: a consumer leased Size tasks from one partition, after waiting LockWait
// for the partition's lock.
type BatchAcquired struct {
	Queue        string
	PartitionKey string
	Size         int
	LockWait     time.Duration
}

// LockContended: a consumer found a partition's lock held by another and skipped the partition.
type LockContended struct {
	Queue        string
	PartitionKey string
}

// Acked: a consumer acked Count tasks in one call, TaskIDs.
type Acked struct {
	Queue   string
	Count   int
	TaskIDs []uuid.UUID
}

// LeaseLost: a task's lease was gone when its holder acked, retried or extended it.
type LeaseLost struct {
	Queue  string
	TaskID uuid.UUID
}

// TaskStarted: a worker started a task's handler Lateness after the task was due.
type TaskStarted struct {
	Queue    string
	TaskID   uuid.UUID
	Attempt  int
	Lateness time.Duration
}

// TaskFinished: a handler returned (Err nil on success) after Duration. Panicked is set
// when the handler panicked; Err then holds the panic value and stack.
type TaskFinished struct {
	Queue    string
	TaskID   uuid.UUID
	Attempt  int
	Duration time.Duration
	Err      error
	Panicked bool
}

// Retried: a failed task will run again after Delay.
type Retried struct {
	Queue   string
	TaskID  uuid.UUID
	Attempt int
	Delay   time.Duration
	Err     error
}

// DeadLettered: a task failed its last allowed attempt and moved to the dead letters.
type DeadLettered struct {
	Queue   string
	TaskID  uuid.UUID
	Attempt int
	Err     error
}

// Snoozed: a handler snoozed its task (shardq.Snooze), which runs again after Delay
// with the same Attempt.
type Snoozed struct {
	Queue   string
	TaskID  uuid.UUID
	Attempt int
	Delay   time.Duration
}

func (BatchAcquired) isEvent() {}
func (LockContended) isEvent() {}
func (Acked) isEvent()         {}
func (LeaseLost) isEvent()     {}
func (TaskStarted) isEvent()   {}
func (TaskFinished) isEvent()  {}
func (Retried) isEvent()       {}
func (DeadLettered) isEvent()  {}
func (Snoozed) isEvent()       {}

// NopObserver discards events. It is every Config's default Observer.
type NopObserver struct{}

// Observe does nothing.
func (NopObserver) Observe(context.Context, Event) {}

// PartitionFailed: reading or writing one partition failed (Op is "peek", "floors",
// "take" or "markers"). The call went on with the other partitions; this one is tried
// again on the next call.
type PartitionFailed struct {
	Queue        string
	PartitionKey string
	Op           string
	Err          error
}

func (PartitionFailed) isEvent() {}

// ClockSkewed: a consumer's Clock was Skew ahead of the cluster's time (behind when
// negative) by more than half its MaxClockSkew. Ahead, it may deliver tasks early and its
// leases end late; behind, its writes land below other consumers' floors, found only by
// their sweeps. Reported at most once per sweep (consumer.SweepInterval).
type ClockSkewed struct {
	Queue string
	Skew  time.Duration
}

func (ClockSkewed) isEvent() {}
