// Package taskrow is a task row of the tasks table (kind 1), as the producer writes
// fresh rows and the consumer swaps them for timeout markers; internal/store spells its
// statements.
package taskrow

import (
	"time"

	"github.com/google/uuid"
)

// Row is one task row. ID's time is when the row becomes visible: the due time of a
// pending task, or the lease deadline of a task in flight. Attempt counts deliveries
// since the task was scheduled or replayed: 0 for a task never delivered. Token counts
// every delivery ever, so it keeps growing across replays.
type Row struct {
	Key      string
	Priority int8
	ID       uuid.UUID
	TaskID   uuid.UUID
	Payload  []byte
	DueAt    time.Time
	Timeout  time.Duration
	Attempt  int
	Token    int64
	// Keyed says the task has a unique key: its end is recorded for key claims.
	Keyed bool
	// Series names the recurring series the task is an occurrence of, if any.
	Series string
	// Retrying marks a marker that waits out a retry delay, not a lease.
	Retrying bool
	// Headers are the task's metadata, kept with every copy of its row; nil when it has none.
	Headers map[string]string
	// Kind is the task's kind, kept with every copy of its row; empty when it has none.
	Kind string
}

// HeaderBytes is what headers count toward a task's size: the bytes of their keys and
// values.
func HeaderBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// Size is what r weighs in a batch or a read: its payload, headers and kind.
func (r Row) Size() int { return len(r.Payload) + HeaderBytes(r.Headers) + len(r.Kind) }

// LockID is the clustering id of a partition's lock row (kind 0, priority 0): a fixed,
// valid version 1 UUID.
var LockID = uuid.UUID{0, 0, 0, 0, 0, 0, 0x10, 0, 0x80}

// Batches to one partition stay under these, well inside Cassandra's mutation limits.
const (
	MaxBatchRows  = 100
	MaxBatchBytes = 512 << 10
)

// Group splits row indexes into per-partition batches of at most MaxBatchRows rows and
// MaxBatchBytes of payload and headers (a single larger row gets a batch of its own).
func Group(rows []Row) [][]int {
	type open struct{ idx, bytes int }
	var batches [][]int
	current := map[string]open{}
	for i, r := range rows {
		o, ok := current[r.Key]
		if ok && (len(batches[o.idx]) >= MaxBatchRows || o.bytes+r.Size() > MaxBatchBytes) {
			ok = false
		}
		if !ok {
			batches = append(batches, nil)
			o = open{idx: len(batches) - 1}
		}
		batches[o.idx] = append(batches[o.idx], i)
		o.bytes += r.Size()
		current[r.Key] = o
	}
	return batches
}
