package inspect

import (
	"context"

	"github.com/google/uuid"
	"github.com/shardq/shardq/shardqtype"
)

// Task reports the state of task id, or returns an error matching shardqtype.ErrTaskNotFound
// (and shardqtype.ErrInvalid for an ID that is no task ID). A task scheduled by a call that
// returned reports TaskScheduled (or a later state); an acked one reports TaskCompleted
// within its queue's CompletedRetention, else it is not found; a dead one reports
// TaskDead (its letter is read with DeadLetters).
//
// The state may lag a crash by one step: a consumer that dies between leasing a task and
// recording the lease leaves the task reported as pending until its lease would have
// ended, and one that dies between acking and recording the ack leaves it not found
// rather than completed.
func (in *Inspector) Task(ctx context.Context, id uuid.UUID) (*shardqtype.TaskInfo, error) {
	return in.tasks.Get(ctx, id)
}

// TaskByKey reports the state of the task that holds unique key in queue, as Task does.
// A key is held while its task is pending, in flight or retrying, and for a while after
// it finished.
func (in *Inspector) TaskByKey(ctx context.Context, queue, key string) (*shardqtype.TaskInfo, error) {
	return in.tasks.GetByKey(ctx, queue, key)
}
