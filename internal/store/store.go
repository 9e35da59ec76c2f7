// Package store is the boundary between shardq's protocol and the tables it keeps: one
// interface per table, speaking in rows and uuid.UUIDs, composed into Store. Packages
// above it decide (what to write, how to settle an unknown outcome); the store only reads
// and writes, so the protocol can run against something other than a live node.
// Cassandra is the implementation on a gocql session, and the one place that spells the
// statements on the tables.
//
// A conditional write is never retried. Its error is the driver's, as is or wrapped, so
// callers tell a definite refusal (lwt.Definite) from an unknown outcome, which they
// settle by the SERIAL reads the store offers (lwt.Apply).
package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
)

// ErrNotFound means a row read by its key is not there.
var ErrNotFound = errors.New("store: not found")

// Store is every table of one keyspace.
type Store interface {
	Tasks() Tasks
	Leasing() Leasing
	Locks() Locks
	Keys() Keys
	Queues() Queues
	Index() Index
	DeadLetters() DeadLetters
	Signals() Signals
	Series() Series
	Scans() Scans
	// Now reads a coordinator's clock (the time that stamps conditional writes and
	// starts TTLs) and names the node that answered, or "" when it cannot tell.
	Now(ctx context.Context) (at time.Time, node string, err error)
}

// Op is what a Mutation does.
type Op int8

const (
	// Insert writes Row at write timestamp Stamp, or, inside a conditional batch, which
	// carries no timestamps of its own, at the coordinator's (Stamp is not used there).
	Insert Op = iota + 1
	// Delete deletes Row; at write timestamp Stamp when set, which a row written at
	// Stamp (clustertime.Clock.Stamp) needs: a delete stamped by a host whose clock trails
	// the cluster's would lose to it.
	Delete
	// DeleteIfExists deletes Row and conditions the batch on its being there.
	DeleteIfExists
	// Release frees Lock and leaves its receipt, conditioning the batch on Lock still
	// holding its partition (Locks.Receipt settles the batch).
	Release
)

// Mutation is one change of a batch of the tasks table.
type Mutation struct {
	Op    Op
	Row   taskrow.Row
	Stamp int64
	Lock  LockRef
}

// Tasks is the tasks table as producers and series use it: task rows written, moved and
// read by their keys. (The consumer's range reads and swaps are Leasing's.)
type Tasks interface {
	// Write applies muts (Insert and Delete, all to one partition) unconditionally: one
	// statement alone, more in one unlogged batch.
	Write(ctx context.Context, muts []Mutation) error
	// Apply applies muts in one logged batch, conditioned by its DeleteIfExists and
	// Release mutations, and reports whether it applied. It is never retried.
	Apply(ctx context.Context, muts []Mutation) (bool, error)
	// DeleteIfExists deletes r if it is there and reports whether it was. It is never
	// retried.
	DeleteIfExists(ctx context.Context, r taskrow.Row) (bool, error)
	// Exists reads at SERIAL whether r is there: a change in flight is settled first.
	Exists(ctx context.Context, r taskrow.Row) (bool, error)
	// Read reads the row at key, priority and id.
	Read(ctx context.Context, key string, priority int8, id uuid.UUID) (taskrow.Row, bool, error)
	// Find reads the row of id in partition key, whichever of priorities it has.
	Find(ctx context.Context, key string, priorities []int8, id uuid.UUID) (taskrow.Row, bool, error)
}

// Scans reads task rows for those that look at a queue without taking part in it (the
// inspector, tools and tests): by range like Leasing, but without payloads, and handing
// rows over page by page as they come, so a pass over a backlog holds one page.
type Scans interface {
	// Tally calls fn with every task row of partition key in prios (highest first) whose
	// ID lies in (from, to], in clustering order, reading pages of pageRows. The rows
	// hold only Key, Priority, ID, Attempt and Retrying.
	Tally(ctx context.Context, key string, prios []int8, from, to uuid.UUID, pageRows int, fn func(taskrow.Row)) error
	// Heads reads up to limit task rows as Tally does, all but Payload, Keyed and Series.
	Heads(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]taskrow.Row, error)
	// TaskIDs calls fn with the task ID of every task row of partition key, whatever its
	// priority and time, reading pages of pageRows.
	TaskIDs(ctx context.Context, key string, pageRows int, fn func(uuid.UUID)) error
}

// Claim is a unique key's row: the task that holds it and when it claimed it. A zero
// Holder means nobody holds the key.
type Claim struct {
	Holder    uuid.UUID
	ClaimedAt time.Time
}

// Keys is the task_keys table: which task holds each unique key of a queue.
type Keys interface {
	// Claim makes claim the key's row for ttl if the row is still seen (zero: none), and
	// reports whether it did; when not, it returns the row as it is. It is never retried.
	Claim(ctx context.Context, queue, key string, claim Claim, ttl time.Duration, seen Claim) (bool, Claim, error)
	// Get reads the key's row, or returns ErrNotFound; serial settles a claim in flight
	// first.
	Get(ctx context.Context, queue, key string, serial bool) (Claim, error)
	// GetTTL reads the key's row and how long its claim has left (zero when unknown), or
	// returns ErrNotFound.
	GetTTL(ctx context.Context, queue, key string) (Claim, time.Duration, error)
	// Release deletes the key's row if holder still holds it. It is never retried.
	Release(ctx context.Context, queue, key string, holder uuid.UUID) error
}

// Queue is a queue's stored settings (shardqtype.QueueConfig converts to and from it).
type Queue struct {
	Name               string
	BucketCount        int
	BucketDuration     time.Duration
	ShardCount         int
	DefaultTimeout     time.Duration
	LockTTL            time.Duration
	CompletedRetention time.Duration
}

// Queues is the queues table.
type Queues interface {
	// Create stores q unless a queue of its name exists, and reports whether it did;
	// when not, it returns the stored settings. It is never retried.
	Create(ctx context.Context, q Queue) (bool, Queue, error)
	// Get reads a queue at SERIAL, so one just created is seen, or returns ErrNotFound.
	Get(ctx context.Context, name string) (Queue, error)
	// Names lists every queue.
	Names(ctx context.Context) ([]string, error)
	// Status reads what of queue name changes after its creation, at SERIAL when serial
	// (completing a change still in flight), or returns ErrNotFound.
	Status(ctx context.Context, name string, serial bool) (QueueStatus, error)
	// Statuses reads every queue's status, by name.
	Statuses(ctx context.Context) (map[string]QueueStatus, error)
	// StatusesOf reads the status of the queues named, in one request; a queue that does
	// not exist is left out.
	StatusesOf(ctx context.Context, names []string) (map[string]QueueStatus, error)
	// SetPaused pauses or resumes queue name, and reports false when there is no such
	// queue. It is conditional, and never retried.
	SetPaused(ctx context.Context, name string, paused bool) (bool, error)
	// SetLayouts replaces queue name's encoded layout history with to if it is still from
	// ("": none), and reports whether it did (false too when there is no such queue). It
	// is conditional, and never retried.
	SetLayouts(ctx context.Context, name, from, to string) (bool, error)
}

// QueueStatus is a queue's row beside its settings: when it was created, whether it is
// paused, and its layout history as encoded by package layouts ("": none).
type QueueStatus struct {
	CreatedAt time.Time
	Paused    bool
	Layouts   string
}

// Index is the task_index table (see package taskindex).
type Index interface {
	// Write writes ws, inflight index partitions at once; on error, failed lists the
	// indexes of ws that may not be written.
	Write(ctx context.Context, ws []taskindex.Write, inflight int) (failed []int, err error)
	// Read returns task id's entry and its write timestamp, or taskindex.ErrNotFound.
	Read(ctx context.Context, id uuid.UUID) (taskindex.Entry, int64, error)
}

// DeadLetters is the dead_letters table (see package deadletters).
type DeadLetters interface {
	Write(ctx context.Context, l deadletters.Letter) error
	// Page returns up to limit of queue's letters kept at now, newest first, older than
	// after (none when uuid.Nil).
	Page(ctx context.Context, queue string, now time.Time, after uuid.UUID, limit int) ([]deadletters.Letter, error)
	// Get returns queue's letter id, and false when it is not kept.
	Get(ctx context.Context, queue string, id uuid.UUID) (deadletters.Letter, bool, error)
	// Delete deletes queue's letter id at write timestamp stamp, in microseconds, which
	// must not be below the letter's: Write leaves that to the coordinator, so stamp by the
	// cluster's clock (clustertime.Clock.DeleteStamp), not this host's.
	Delete(ctx context.Context, queue string, id uuid.UUID, stamp int64) error
	// Count counts queue's letters kept at now, reading pages of pageSize rows, and calls
	// done after each day's partition.
	Count(ctx context.Context, queue string, now time.Time, pageSize int, done func()) (int, error)
}

// Signals is the queue_signals table (see package signal).
type Signals interface {
	// Touch writes cells.
	Touch(ctx context.Context, cells []signal.Touch) error
	// Cells reads the cells of queue's buckets from..to.
	Cells(ctx context.Context, queue string, from, to int64) (map[signal.Cell]uuid.UUID, error)
	// CellsOf reads the cells of buckets from..to of rings whose buckets are equally
	// long, in one request.
	CellsOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, error)
	// LastTouches reads the slots of those cells and when each was last touched.
	LastTouches(ctx context.Context, queue string, from, to int64) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error)
	// CellsAndTouchesOf is CellsOf and LastTouches on buckets from..to of rings whose
	// buckets are equally long, in one request.
	CellsAndTouchesOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error)
	// Passed reads ring's pass mark (the queue_passes table): per concurrency shard a
	// bucket, and when the mark was made; nil when none is stored.
	Passed(ctx context.Context, ring string) (map[int]int64, time.Time, error)
	// Pass stores ring's pass mark, made at madeAt, over the one stored.
	Pass(ctx context.Context, ring string, mark map[int]int64, madeAt time.Time) error
}

// SeriesRow is one series as stored; Spec is its encoded spec.
type SeriesRow struct {
	Queue, Name string
	Spec        string
	Version     int64
	Paused      bool
	Done        bool
	Seq         int64
	Open        bool
	TaskID      uuid.UUID
	Nominal     time.Time
	Priority    int8
	Stamp       int64
	CatchUp     bool
	AdvancedAt  time.Time
	CreatedAt   time.Time
	Written     uuid.UUID
}

// Series is the series and series_names tables.
type Series interface {
	// Get reads a series, or returns ErrNotFound; serial settles a change in flight
	// first. A row holding only a Written cell (left by a delete) is not found.
	Get(ctx context.Context, queue, name string, serial bool) (SeriesRow, error)
	// Names lists the series of a queue, in name order.
	Names(ctx context.Context, queue string) ([]string, error)
	// NamesOf lists the series of each of queues, in name order, in one request; a queue
	// with none is left out.
	NamesOf(ctx context.Context, queues []string) (map[string][]string, error)
	// AddName lists name in queue, at write timestamp stamp (the cluster's time, see
	// internal/series).
	AddName(ctx context.Context, queue, name string, stamp int64) error
	// Put writes r, all but Written, if the stored version is from (0: no series), and
	// reports whether it did. It is never retried.
	Put(ctx context.Context, r SeriesRow, from int64) (bool, error)
	// Delete deletes a series if it is still at version, and reports whether it did. It
	// is never retried.
	Delete(ctx context.Context, queue, name string, version int64) (bool, error)
	// DeleteName unlists name from queue, at write timestamp stamp, as AddName.
	DeleteName(ctx context.Context, queue, name string, stamp int64) error
	// MarkWritten records occurrence id of a series as written, at write timestamp
	// stamp, so that a later occurrence's record wins whoever writes it.
	MarkWritten(ctx context.Context, queue, name string, id uuid.UUID, stamp int64) error
}
