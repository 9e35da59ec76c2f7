// Package taskindex is the task_index table's entries: where each task's row is and what
// state the task is in, for Get, Cancel and Reschedule (internal/store reads and writes
// them).
//
// Every move of a task writes its entry before the move (so a crash in between leaves the
// entry pointing at both the old and the new row, and readers check which exists) or after
// it, for the final step (ack, dead letter, cancel), whose loss leaves an entry pointing at
// rows that are gone, which readers take for "not found". Write timestamps come from the
// task, not from clocks: Stamp grows with the task's delivery token and with each step of
// one delivery, so the later step wins even when the processes that wrote them disagree
// about the time.
package taskindex

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// State is a task's state as recorded. The values are stored: never renumber them.
type State int8

const (
	Scheduled State = 1
	InFlight  State = 2
	Retrying  State = 3
	Dead      State = 4
	Completed State = 5
	Cancelled State = 6
)

// Finished is how long the entry of a task that completed or was cancelled is kept at
// least: long enough for a producer claiming the task's key to tell a finished task from
// one whose producer is still writing it (producer.KeyClaimGrace).
const Finished = 10 * time.Minute

// Slots is how many partitions share one minute of task IDs.
const Slots = 32

// stepBits leaves room for 2^20-1 steps (extensions, retries, reschedules) per delivery.
const stepBits = 20

// Final is the step of the write that ends a delivery: ack, dead letter or cancel.
const Final = 1<<stepBits - 1

// leaseSteps is how many steps a lease's declaration may take. Two takes of one row
// declare the same delivery, and when the first one's swap did not apply, the second,
// which holds the partition's lock with a greater token, must outrank it: at one stamp
// Cassandra keeps the greater value of each cell, and the entry would name the rows of
// both, one of them dropped. The moves a holder makes after its swap come above them.
const leaseSteps = 1 << (stepBits - 1)

// LeaseStep is the step of a lease's declaration made under the lock with token
// lockToken (a partition's tokens grow by one per holder; they wrap after 2^19 holders).
func LeaseStep(lockToken int64) int64 { return lockToken % leaseSteps }

// MoveStep is the step of the nth move (Extend, Retry) a holder makes after its swap.
func MoveStep(n int64) int64 { return leaseSteps + n }

// Keep is how long an entry outlives the time its row becomes visible, so an entry of a
// task that waits in a backlog, or one whose final write was lost, still goes away.
const Keep = 30 * 24 * time.Hour

// maxTTL is Cassandra's largest TTL (20 years).
const maxTTL = 20 * 365 * 24 * time.Hour

// Loc is where a row of the tasks table is; a zero Key means nowhere.
type Loc struct {
	Key      string
	Priority int8
	ID       uuid.UUID
}

// Entry is one task's index row.
type Entry struct {
	TaskID    uuid.UUID
	Queue     string
	Key       string // the task's unique key, if any
	State     State
	Row       Loc // where the task's row is now, for the pending and in-flight states
	PrevState State
	Prev      Loc // where it was before the last move, until the move is known done
	// The rest is recorded only by final entries: a task still pending or in flight is
	// described by its row, which readers read anyway.
	DueAt   time.Time
	Attempt int
	Token   int64
	Error   string
	DoneAt  time.Time
}

// Final reports whether s ends a task's life (until a replay).
func (s State) Final() bool { return s == Dead || s == Completed || s == Cancelled }

// Stamp is the write timestamp of step of the delivery numbered token (0 before the first).
func Stamp(taskID uuid.UUID, token int64, step int64) int64 {
	return shard.IDTime(taskID).UnixMicro() + token<<stepBits + step
}

// Delivery is the delivery token of the entry of taskID written at stamp: what Stamp
// was given, for entries (of tasks still moving) that do not record it.
func Delivery(taskID uuid.UUID, stamp int64) int64 {
	return (stamp - shard.IDTime(taskID).UnixMicro()) >> stepBits
}

// TTL is how long an entry whose row becomes visible at visible is kept, from now.
func TTL(now, visible time.Time) time.Duration {
	return min(max(visible.Sub(now), 0)+Keep, maxTTL)
}

// Partition is the index partition of task id's entry: its minute and slot.
func Partition(id uuid.UUID) (int32, int8) {
	minute := shard.IDTime(id).Unix() / 60
	return int32(minute), int8(binary.BigEndian.Uint64(id[8:]) % Slots)
}

// Write is one entry to write with its timestamp (Stamp) and TTL; with Replace, in place
// of all the entry held; with Delete, the removal of the entry of Entry.TaskID.
type Write struct {
	Entry   Entry
	Stamp   int64
	TTL     time.Duration
	Replace bool
	Delete  bool
}

// ErrNotFound means the index holds no entry for the task.
var ErrNotFound = errors.New("taskindex: no entry")
