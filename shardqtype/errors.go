package shardqtype

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalid is matched by every validation error: bad configuration or bad input.
	// Nothing was written when it is returned.
	ErrInvalid = errors.New("shardq: invalid")
	// ErrQueueNotFound means no queue of that name was created.
	ErrQueueNotFound = errors.New("shardq: queue not found")
	// ErrQueueMismatch means a queue exists with settings other than the ones given.
	ErrQueueMismatch = errors.New("shardq: queue settings mismatch")
	// ErrQueuePaused means the queue is paused (PauseQueue): no task was taken.
	ErrQueuePaused = errors.New("shardq: queue paused")
	// ErrClockUnmeasured means this process has not yet measured the cluster's clock
	// (reading a coordinator's clock failed, as it wraps): nothing was written or taken.
	// A host's own clock, ahead of the cluster's by any amount, would lease tasks early
	// and stamp rows that later deletes cannot shadow. Each call measures again.
	ErrClockUnmeasured = errors.New("shardq: cluster clock not measured")
)

// ValidationError names the field or argument that was rejected and why. It matches
// ErrInvalid, and Err when set (for instance producer.ErrPayloadTooLarge).
type ValidationError struct {
	Field  string
	Reason string
	Err    error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("shardq: invalid %s: %s", e.Field, e.Reason)
}

func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// invalid returns a *ValidationError for field.
func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// QueueMismatchError says which stored setting differs from the one given. It matches
// ErrQueueMismatch.
type QueueMismatchError struct {
	Queue  string
	Field  string
	Stored any
	Given  any
}

func (e *QueueMismatchError) Error() string {
	return fmt.Sprintf("shardq: queue %q exists with %s = %v, not %v", e.Queue, e.Field, e.Stored, e.Given)
}

func (e *QueueMismatchError) Unwrap() error { return ErrQueueMismatch }

// ErrLayoutChanging means a queue's layout cannot change yet: a change has yet to take
// effect, or too many layouts are still draining. LayoutChangingError says until when.
var ErrLayoutChanging = errors.New("shardq: queue layout changing")

// LayoutChangingError refuses a layout change, saying why and from when it may be tried
// again (not before RetryAt; a layout draining may need longer). It matches
// ErrLayoutChanging.
type LayoutChangingError struct {
	Queue   string
	Reason  string
	RetryAt time.Time
}

func (e *LayoutChangingError) Error() string {
	return fmt.Sprintf("shardq: the layout of queue %q cannot change yet (%s); try again from %v", e.Queue, e.Reason, e.RetryAt.UTC().Format(time.RFC3339))
}

func (e *LayoutChangingError) Unwrap() error { return ErrLayoutChanging }

// SnoozeError, returned by a handler (shardq.Snooze), gives its task back to be delivered
// again after Delay. The delivery does not count as an attempt.
type SnoozeError struct {
	Delay time.Duration
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("shardq: snoozed for %v", e.Delay) }

// CancelError, returned by a handler (shardq.Cancel), ends its task for good: it is not
// delivered again, and goes to the queue's dead letters with Err as its error.
type CancelError struct {
	Err error
}

func (e *CancelError) Error() string {
	return fmt.Sprintf("shardq: cancelled by its handler: %v", e.Err)
}

func (e *CancelError) Unwrap() error { return e.Err }
