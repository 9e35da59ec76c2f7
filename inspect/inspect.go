// Package inspect reads a queue's tables without changing them, for operators and
// dashboards: what the partitions of the current lap hold (Stats), the tasks due next in
// delivery order (Peek), one task by ID or unique key (Task, TaskByKey), the dead letters
// kept (DeadLetters, DeadLetter, CountDeadLetters), and the queues stored (Queues,
// Queue). It never takes a partition's lock and never writes, so it cannot disturb
// consumers; what it reports may be a moment old by the time it returns. Tasks and dead
// letters come back as shardqtype.TaskInfo, the one task row type of the library; acting on
// them (Cancel, Reschedule, ReplayDeadLetter, PurgeDeadLetter) is the producer's.
//
// Reads stay bounded: one lap's partitions (BucketCount × ShardCount), each read from
// where consumers read it (the read floors its last swap recorded in the lock row, or the
// beginning of time), up to one lap ahead, in pages. Tombstones of consumed tasks
// below the floors are skipped as they are by consumers.
package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Defaults for Config.
const (
	DefaultPartitionsInFlight = 8
	// DefaultPageSize is how many rows one page of a partition read holds: a few hundred
	// kilobytes of keys and counters, whatever the partition holds.
	DefaultPageSize = 5000
)

// groupSpan is how far apart the floors of priorities read by one query may be: the
// tombstones between them are few. It matches consumer.DefaultMaxClockSkew, which the
// consumers group their reads by.
const groupSpan = 2 * time.Second

// Config configures an Inspector.
type Config struct {
	// PartitionsInFlight is how many partitions are read at once.
	// Defaults to DefaultPartitionsInFlight.
	PartitionsInFlight int
	// PageSize is how many rows one page of a read holds. Defaults to DefaultPageSize.
	PageSize int
	// Clock tells what is due now. Defaults to the cluster's time: this host's clock
	// corrected by its measured offset from the coordinators', as every part's.
	Clock shardqtype.Clock
}

// Inspector reads the queues of one session's keyspace. It is safe for concurrent use.
type Inspector struct {
	cfg   Config
	state *sessionstate.State // the session's store and cache of queue settings
	tasks *tasklookup.Finder  // finds tasks by ID and key, as the producer's moves do
}

// New returns an Inspector reading through session, whose keyspace holds shardq's tables.
func New(d *shardqtype.Driver, cfg Config) (*Inspector, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	for _, err := range []error{
		defaults.NonNegative(&cfg.PartitionsInFlight, DefaultPartitionsInFlight, "Config.PartitionsInFlight"),
		defaults.NonNegative(&cfg.PageSize, DefaultPageSize, "Config.PageSize"),
	} {
		if err != nil {
			return nil, err
		}
	}
	st := sessionstate.For(d, nil)
	if cfg.Clock == nil {
		cfg.Clock = st.Cluster
	}
	return &Inspector{cfg: cfg, state: st, tasks: tasklookup.New(st.Store, cfg.Clock, st.Queue)}, nil
}

// queueRead is one queue being read: its settings, the partition layout in force, and
// the earlier layouts consumers still read (see shardq.ChangeLayout).
type queueRead struct {
	cfg      shardqtype.QueueConfig
	layout   shard.Layout
	draining []shard.Layout
}

// queue reads name's settings, or returns an error matching shardqtype.ErrQueueNotFound.
func (in *Inspector) queue(ctx context.Context, name string) (queueRead, error) {
	q, err := in.state.Queue(ctx, name)
	if err != nil {
		return queueRead{}, err
	}
	h, err := in.state.Layouts(ctx, name)
	if err != nil {
		return queueRead{}, err
	}
	r := queueRead{cfg: q, layout: h.At(in.cfg.Clock.Now())}
	for _, l := range h.Live() {
		if l.Generation != r.layout.Generation {
			r.draining = append(r.draining, l)
		}
	}
	return r, nil
}

// partition is one partition of a lap: its concurrency shard and the bucket of the lap
// that it holds now (the latest that has begun), and whether it is of a layout draining
// rather than the one in force.
type partition struct {
	key      string
	shard    int
	bucket   int64
	draining bool
}

// lap lists the partitions of the lap ending with the bucket of now, concurrency shard
// by concurrency shard, then those of each layout draining.
func (q queueRead) lap(now time.Time) []partition {
	out := lapOf(q.layout, now, false)
	for _, l := range q.draining {
		out = append(out, lapOf(l, now, true)...)
	}
	return out
}

func lapOf(l shard.Layout, now time.Time, draining bool) []partition {
	bNow := l.Bucket(now)
	n := int64(l.BucketCount)
	var out []partition
	for s := range l.ShardCount {
		for b := bNow - n + 1; b <= bNow; b++ {
			out = append(out, partition{key: l.Key(b, s), shard: s, bucket: b, draining: draining})
		}
	}
	return out
}

// starts holds, per priority, the exclusive lower bound of the IDs consumers read.
type starts = [scanplan.NPriorities]uuid.UUID

// readStarts returns where consumers read pt from, priority by priority, as a consumer
// starts a partition (see package consumer): the floors the last swap recorded in the
// lock row, in whatever lap (rows are never written below a floor), else the beginning
// of time, so a task that waited through laps without consumers is counted.
func (in *Inspector) readStarts(ctx context.Context, pt partition) (starts, error) {
	stored, err := in.state.Store.Leasing().Floors(ctx, pt.key)
	if err != nil {
		return starts{}, fmt.Errorf("reading the floors of %s: %w", pt.key, err)
	}
	var s starts
	for p := range s {
		s[p] = shard.MinID(shard.MinIDTime)
		if v, ok := stored[int8(p)]; ok {
			s[p] = v
		}
	}
	return s, nil
}

// plan splits the priorities into the runs consumers read from s: a priority far behind
// the others (a backlog) is read on its own, so the others' tombstones above its start
// are not.
func plan(s *starts) []scanplan.Group { return scanplan.Groups(*s, groupSpan) }

// allPriorities lists every priority, highest first.
var allPriorities = func() []int8 {
	var p []int8
	for i := shardqtype.MaxPriority; i >= shardqtype.MinPriority; i-- {
		p = append(p, int8(i))
	}
	return p
}()

// PartitionError is a partition that could not be read; what it holds is not counted.
type PartitionError struct {
	PartitionKey string
	Err          error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("inspect: reading %s: %v", e.PartitionKey, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }
