package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/taskrow"
)

// Leasing is what a consumer reads and writes in the tasks table to lease tasks and end
// their leases: the floors recorded in a partition's lock row, ranges of task rows, the
// timeout markers of leases, the swap that trades rows read for the lock's release, and
// the SERIAL reads that settle conditional writes.
//
// Its errors are the driver's (wrapped with %w at most), so lwt.Definite and lwt.Apply
// tell a refusal from an unknown outcome: the methods reporting whether a conditional
// write applied never settle one themselves, and a caller whose write came back unknown
// settles it by a SERIAL read (MarkersThere, or the lock's receipt for Swap).
type Leasing interface {
	// Floors returns the floors the last swap of partition key recorded, per priority;
	// nil when it recorded none.
	Floors(ctx context.Context, key string) (map[int8]uuid.UUID, error)
	// IDs reads the priority and ID of up to limit task rows of partition key in prios
	// (highest first) whose IDs lie in (from, to], in clustering order.
	IDs(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]RowRef, error)
	// Rows reads up to limit task rows as IDs does, in pages of pageRows, and stops once
	// the rows read hold maxBytes of payload or more (the row that crosses it is kept),
	// reporting whether it stopped early (cut).
	Rows(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit, pageRows, maxBytes int) (rows []taskrow.Row, cut bool, err error)
	// WriteMarkers writes rows, stamped ts (clustertime.Clock.Stamp), in plain batches of
	// one partition and a bounded size each, up to inFlight at once.
	WriteMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error
	// DropMarkers deletes rows, which no one else can have written (their IDs are new),
	// in plain batches as WriteMarkers writes them, at ts, the stamp WriteMarkers wrote
	// them with: deletes stamped by a host whose clock trails the cluster's would lose.
	DropMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error
	// Swap deletes rows, all of lk's partition, and releases lk recording floors for
	// the lap of bucket and leaving lk's receipt, in one conditional batch: it applies
	// only while lk holds the lock and every row delivered before (Attempt > 0) still
	// exists. An unknown outcome is settled by lk's receipt
	// (locking.Lock.Settle, by Locks.Receipt).
	Swap(ctx context.Context, lk LockRef, bucket int64, floors map[int8]uuid.UUID, rows []taskrow.Row) (applied bool, err error)
	// DeleteMarker deletes a marker if it exists, reporting whether it did.
	DeleteMarker(ctx context.Context, marker taskrow.Row) (applied bool, err error)
	// DeleteMarkers deletes markers, all of one partition, in one conditional batch that
	// applies only if every one exists.
	DeleteMarkers(ctx context.Context, markers []taskrow.Row) (applied bool, err error)
	// ReplaceMarker deletes marker from and writes to, both of one partition, in one
	// conditional batch that applies only if from exists; both are stamped by the
	// batch's ballot, as every write of a conditional batch is.
	ReplaceMarker(ctx context.Context, from, to taskrow.Row) (applied bool, err error)
	// MarkersThere reads at SERIAL, completing any conditional write in flight, which of
	// markers (all of one partition) exist, by ID.
	MarkersThere(ctx context.Context, markers []taskrow.Row) (map[uuid.UUID]bool, error)
}

// RowRef names a task row within its partition.
type RowRef struct {
	Priority int8
	ID       uuid.UUID
}
