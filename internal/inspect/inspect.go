// Package inspect reads a queue's tables without changing them, for operators: what the
// partitions of the current lap hold (Stats), the tasks due next in delivery order (Peek),
// and the queues stored (Queues). It never takes a shard's lock and never writes, so it
// cannot disturb consumers; what it reports may be a moment old by the time it returns.
//
// Reads stay bounded: one lap's partitions (BucketCount × ShardCount), each read from
// where consumers read it (the read floors its last swap recorded in the lock row, or the
// beginning of time), up to one lap ahead, in pages. Tombstones of consumed tasks
// below the floors are skipped as they are by consumers.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
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
	// Queue is the settings of the queue to read, as shardq.LoadQueue returns them.
	// Required.
	Queue shardq.QueueConfig
	// PartitionsInFlight is how many partitions are read at once.
	// Defaults to DefaultPartitionsInFlight.
	PartitionsInFlight int
	// PageSize is how many rows one page of a read holds. Defaults to DefaultPageSize.
	PageSize int
	// Clock tells what is due now. Defaults to shardq.SystemClock.
	Clock shardq.Clock
}

// Inspector reads one queue. It is safe for concurrent use.
type Inspector struct {
	session *gocql.Session
	cfg     Config
	layout  shard.Layout
}

// New returns an Inspector of cfg.Queue reading through session.
func New(session *gocql.Session, cfg Config) (*Inspector, error) {
	if session == nil {
		return nil, shardq.Invalid("session", "is nil")
	}
	if err := cfg.Queue.Validate(); err != nil {
		return nil, err
	}
	for _, err := range []error{
		defaults.NonNegative(&cfg.PartitionsInFlight, DefaultPartitionsInFlight, "Config.PartitionsInFlight"),
		defaults.NonNegative(&cfg.PageSize, DefaultPageSize, "Config.PageSize"),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = shardq.SystemClock{}
	}
	return &Inspector{session: session, cfg: cfg, layout: cfg.Queue.Layout()}, nil
}

// partition is one partition of the current lap: its concurrency shard and the bucket of
// the lap that it holds now (the latest that has begun).
type partition struct {
	key    string
	shard  int
	bucket int64
}

// lap lists the partitions of the lap ending with the bucket of now, concurrency shard
// by concurrency shard.
func (in *Inspector) lap(now time.Time) []partition {
	bNow := in.layout.Bucket(now)
	n := int64(in.layout.BucketCount)
	var out []partition
	for s := range in.layout.ShardCount {
		for b := bNow - n + 1; b <= bNow; b++ {
			out = append(out, partition{key: in.layout.Key(b, s), shard: s, bucket: b})
		}
	}
	return out
}

const nPriorities = shardq.MaxPriority - shardq.MinPriority + 1

// starts holds, per priority, the exclusive lower bound of the IDs consumers read.
type starts [nPriorities]gocql.UUID

const selectFloors = `SELECT floors FROM tasks WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`

// readStarts returns where consumers read pt from, priority by priority, as a consumer
// starts a partition (see package consumer): the floors the last swap recorded in the
// lock row, in whatever lap (rows are never written below a floor), else the beginning
// of time, so a task that waited through laps without consumers is counted.
func (in *Inspector) readStarts(ctx context.Context, pt partition) (starts, error) {
	var stored map[int8]gocql.UUID
	err := cql.Query(in.session, selectFloors, pt.key, taskrow.LockID).WithContext(ctx).Scan(&stored)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return starts{}, fmt.Errorf("reading the floors of %s: %w", pt.key, err)
	}
	var s starts
	for p := range s {
		s[p] = gocql.UUID(shard.MinID(shard.MinIDTime))
		if v, ok := stored[int8(p)]; ok {
			s[p] = v
		}
	}
	return s, nil
}

// group is a run of priorities, highest first, read by one query from one bound.
type group struct {
	prios []int8
	from  gocql.UUID
}

// plan splits the priorities into runs whose starts lie within groupSpan of each other,
// each read from its lowest start, as consumers do: a priority far behind the others (a
// backlog) is read on its own, so the others' tombstones above its start are not.
func plan(s *starts) []group {
	var groups []group
	var lo, hi time.Time
	for p := shardq.MaxPriority; p >= shardq.MinPriority; p-- {
		t := shard.IDTime(uuid.UUID(s[p]))
		if n := len(groups); n > 0 && t.Sub(lo) <= groupSpan && hi.Sub(t) <= groupSpan {
			g := &groups[n-1]
			g.prios = append(g.prios, int8(p))
			if shard.CompareIDs(uuid.UUID(s[p]), uuid.UUID(g.from)) < 0 {
				g.from = s[p]
			}
			if t.Before(lo) {
				lo = t
			}
			if t.After(hi) {
				hi = t
			}
			continue
		}
		groups = append(groups, group{prios: []int8{int8(p)}, from: s[p]})
		lo, hi = t, t
	}
	return groups
}

// allPriorities lists every priority, highest first.
var allPriorities = func() []int8 {
	var p []int8
	for i := shardq.MaxPriority; i >= shardq.MinPriority; i-- {
		p = append(p, int8(i))
	}
	return p
}()

// PartitionError is a partition that could not be read; what it holds is not counted.
type PartitionError struct {
	ShardKey string
	Err      error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("inspect: reading %s: %v", e.ShardKey, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }

// sortTasks orders tasks as consumers deliver them: highest priority first, then the
// earliest visible.
func sortTasks(ts []Task) {
	sort.SliceStable(ts, func(i, j int) bool { return before(ts[i], ts[j]) })
}

func before(a, b Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return shard.CompareIDs(uuid.UUID(a.row), uuid.UUID(b.row)) < 0
}
