package shardq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/shardqtype"
)

// Args are a task's arguments: a kind of task, encoded as JSON when inserted and decoded
// into a fresh value of the same type for the worker registered for the kind.
type Args interface {
	// Kind names the kind of task, and so the worker that runs it. It must not change
	// while tasks of the kind may be waiting: it is stored with each task.
	Kind() string
}

// ArgsWithInsertOpts are Args that give every insert of their kind its defaults. A field
// set in the InsertOpts passed to Insert wins over the kind's.
type ArgsWithInsertOpts interface {
	Args
	InsertOpts() InsertOpts
}

// Worker runs tasks of one kind. Returning nil acks the task; an error retries it with
// backoff, or dead-letters it once its attempts are used up; Snooze(d) gives it back for
// d without counting the attempt; Cancel(err) dead-letters it at once. A panic is an
// error carrying its stack. ctx ends when the task's lease does, or when the client is
// stopped with StopAndCancel.
type Worker[T Args] interface {
	Work(ctx context.Context, task *Task[T]) error
}

// WorkFunc adapts a function to Worker.
type WorkFunc[T Args] func(ctx context.Context, task *Task[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, task *Task[T]) error { return f(ctx, task) }

// Task is one delivery of a task of kind T, as its worker receives it.
type Task[T Args] struct {
	// Args are the task's arguments, decoded.
	Args T
	ID   uuid.UUID
	// Kind is Args.Kind(), as stored with the task.
	Kind  string
	Queue string
	// DueAt is when the task was due.
	DueAt    time.Time
	Priority int
	// Attempt counts deliveries, 1 on the first; deliveries that were snoozed do not count.
	Attempt int
	// MaxAttempts is how many attempts the task gets before it is dead-lettered.
	MaxAttempts int
	// Deadline is when this delivery's lease ends: ctx ends then too.
	Deadline time.Time
	// Token is the fencing token of this delivery: it grows with every delivery of the
	// task. Pass it to systems that must reject writes from a holder whose lease passed.
	Token int64
	// Headers are the headers the task was inserted with; nil when it has none.
	Headers map[string]string
}

// Workers holds the worker of each kind a client runs. Add them with AddWorker or
// AddWorkerFunc before the client starts.
type Workers struct {
	kinds map[string]kindWorker
}

// kindWorker runs a task of its kind from its stored form.
type kindWorker func(ctx context.Context, t *consumer.Task, maxAttempts int) error

// NewWorkers returns an empty set of workers.
func NewWorkers() *Workers { return &Workers{kinds: make(map[string]kindWorker)} }

// AddWorker registers w for the kind of T. It panics when the kind is empty or has a
// worker already, as http.ServeMux does for a pattern registered twice: both are
// mistakes of the program, found the first time it runs.
func AddWorker[T Args](workers *Workers, w Worker[T]) {
	var zero T
	kind := zero.Kind()
	if kind == "" {
		panic(fmt.Sprintf("shardq: AddWorker: %T has an empty Kind", zero))
	}
	if _, ok := workers.kinds[kind]; ok {
		panic(fmt.Sprintf("shardq: AddWorker: kind %q has a worker already", kind))
	}
	workers.kinds[kind] = func(ctx context.Context, t *consumer.Task, maxAttempts int) error {
		var args T
		if err := json.Unmarshal(t.Payload, &args); err != nil {
			return fmt.Errorf("shardq: decoding the args of kind %q: %w", kind, err)
		}
		return w.Work(ctx, &Task[T]{Args: args, ID: t.ID, Kind: kind, Queue: t.Queue, DueAt: t.DueAt,
			Priority: t.Priority, Attempt: t.Attempt, MaxAttempts: maxAttempts, Deadline: t.Deadline,
			Token: t.Token, Headers: taskmeta.User(t.Headers)})
	}
}

// AddWorkerFunc registers f for the kind of T, as AddWorker does.
func AddWorkerFunc[T Args](workers *Workers, f func(ctx context.Context, task *Task[T]) error) {
	AddWorker(workers, WorkFunc[T](f))
}

// ErrUnknownKind is matched by *UnknownKindError.
var ErrUnknownKind = errors.New("shardq: no worker for the task's kind")

// UnknownKindError is the error of a task whose kind has no worker in the client that
// took it: it is retried with backoff like any failure, so a client of a newer release
// may run it, and dead-lettered with this error once its attempts are used up. It
// matches ErrUnknownKind.
type UnknownKindError struct {
	Kind string
}

func (e *UnknownKindError) Error() string {
	if e.Kind == "" {
		return "shardq: the task has no kind (it was not inserted by a client), and no worker runs it"
	}
	return fmt.Sprintf("shardq: no worker is registered for kind %q", e.Kind)
}

func (e *UnknownKindError) Unwrap() error { return ErrUnknownKind }

// Snooze, returned by a worker, gives the task back to be delivered again after d (cut
// to the queue's MaxTimeout); the delivery does not count as an attempt.
func Snooze(d time.Duration) error { return &shardqtype.SnoozeError{Delay: d} }

// Cancel, returned by a worker, ends the task for good: it is not delivered again, and
// goes to the queue's dead letters with err as its error, where it can be replayed.
func Cancel(err error) error { return &shardqtype.CancelError{Err: err} }
