package inspect

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// class is what a task row counts as in Stats.
type class int

// Classes of task rows; Counts says what each holds.
const (
	due class = iota
	dueAgain
	scheduled
	inFlight
	retrying
)

// classify tells what a task row counts as, from its delivery count, whether it is a
// retry, and the time its ID carries (when it becomes visible), at now. A row delivered
// before and visible now is due again whether its lease ran out or a retry came due.
func classify(attempt int, isRetry bool, visible, now time.Time) class {
	switch {
	case !visible.After(now) && attempt == 0:
		return due
	case !visible.After(now):
		return dueAgain
	case attempt == 0:
		return scheduled
	case isRetry:
		return retrying
	}
	return inFlight
}

// Counts counts task rows by what they hold.
type Counts struct {
	// Due rows are visible now and were never delivered.
	Due int `json:"due"`
	// DueAgain rows are visible now and were delivered before: a lease ran out, or a
	// retry's delay did.
	DueAgain int `json:"due_again"`
	// Scheduled rows become visible later in this lap and were never delivered.
	Scheduled int `json:"scheduled"`
	// InFlight rows are timeout markers of delivered tasks, visible again at their lease
	// deadline.
	InFlight int `json:"in_flight"`
	// Retrying rows are failed tasks waiting out their retry delay.
	Retrying int `json:"retrying"`
	// BehindFloors counts the rows, among Due and DueAgain, that lie below where
	// consumers read their partition: consumers do not deliver them. Only a StatsOptions.Full
	// pass looks there.
	BehindFloors int `json:"behind_floors,omitempty"`
}

func (c *Counts) add(o Counts) {
	c.Due += o.Due
	c.DueAgain += o.DueAgain
	c.Scheduled += o.Scheduled
	c.InFlight += o.InFlight
	c.Retrying += o.Retrying
	c.BehindFloors += o.BehindFloors
}

func (c *Counts) count(cl class) {
	switch cl {
	case due:
		c.Due++
	case dueAgain:
		c.DueAgain++
	case scheduled:
		c.Scheduled++
	case inFlight:
		c.InFlight++
	case retrying:
		c.Retrying++
	}
}

// Stats is what one pass over a queue's lap found.
type Stats struct {
	// At is the time the pass counted from: rows visible by At are due.
	At time.Time
	// Layout is the layout Shards and Lap picture: the one in force at At, which differs
	// from the queue's first once it was changed (shardq.ChangeLayout). Rows due more
	// than Layout.Lap() past At are not read.
	Layout shard.Layout
	// Shards counts rows by concurrency shard.
	Shards []Counts
	// Lap counts rows by partition, for a shard × bucket picture of the lap:
	// Lap[s][t] is what concurrency shard s's partition of time shard t holds (the bucket
	// of At is time shard Layout.TimeShard(Layout.Bucket(At)) of the queue's layout).
	// Shards[s] adds up Lap[s]; a partition in Failed counts zero.
	Lap [][]Counts
	// Draining counts the rows of the layouts a layout change left, which consumers read
	// until they are empty (shardq.ChangeLayout): one lap of each. Shards and Lap are of
	// the layout in force.
	Draining Counts
	// Total adds Shards and Draining up.
	Total Counts
	// OldestDue is when the earliest row that is due became visible; zero when none is.
	OldestDue time.Time
	// DeadLetters counts the dead letters kept for the queue, in the partitions of the
	// last DeadDays days.
	DeadLetters int
	DeadDays    int
	// Partitions is how many partitions of tasks were read, RowsRead how many task rows.
	Partitions int
	RowsRead   int
	// Failed lists the partitions that could not be read; their rows are not counted.
	// When the dead letters could not be read, the last one names dead_letters.
	Failed []*PartitionError
}

// StatsOptions tunes one Stats call.
type StatsOptions struct {
	// Full reads every partition from its start instead of from where consumers read it,
	// and counts the due rows below that in Counts.BehindFloors. It walks the tombstones
	// of every task consumed since they were last purged (gc_grace_seconds, 10 minutes),
	// and a partition drained of more than Cassandra's tombstone_failure_threshold
	// (100,000) in that time fails to read.
	Full bool
	// Progress, when set, is called after each partition read, with how many of total
	// reads are done; calls may come from several goroutines, one at a time.
	Progress func(done, total int)
}

// Stats counts the rows of the current lap's partitions: due now, due again, scheduled
// later in the lap, in flight, by concurrency shard; when the earliest due row became
// visible; and the dead letters kept. It reads 2 × BucketCount × ShardCount times (one
// more for each priority whose floor lags the others', a backlog) plus DeadDays, and
// every row pending in the lap once, in pages, so memory stays small whatever the queue
// holds. A partition that cannot be read is listed in Failed; the
// error returned is ctx's, or one for a queue that cannot be read (matching
// shardqtype.ErrQueueNotFound when there is none of that name).
func (in *Inspector) Stats(ctx context.Context, queue string, opts StatsOptions) (*Stats, error) {
	q, err := in.queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	now := in.cfg.Clock.Now()
	parts := q.lap(now)
	st := &Stats{At: now, Layout: q.layout, Shards: make([]Counts, q.layout.ShardCount),
		Lap: make([][]Counts, q.layout.ShardCount), Partitions: len(parts), DeadDays: deadletters.Days}
	for s := range st.Lap {
		st.Lap[s] = make([]Counts, q.layout.BucketCount)
	}
	total := len(parts) + st.DeadDays
	var mu sync.Mutex
	done := 0
	progress := func(n int) {
		mu.Lock()
		defer mu.Unlock()
		done += n
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	upper := shard.MaxID(now.Add(q.layout.Lap())) // rows due later are not read
	_ = fanout.Each(len(parts), in.cfg.PartitionsInFlight, func(i int) error {
		c, oldest, rows, err := in.countPartition(ctx, parts[i], now, upper, opts.Full)
		mu.Lock()
		if err != nil {
			st.Failed = append(st.Failed, &PartitionError{PartitionKey: parts[i].key, Err: err})
		} else {
			if parts[i].draining {
				st.Draining.add(c)
			} else {
				st.Shards[parts[i].shard].add(c)
				st.Lap[parts[i].shard][q.layout.TimeShard(parts[i].bucket)] = c
			}
			st.RowsRead += rows
			if !oldest.IsZero() && (st.OldestDue.IsZero() || oldest.Before(st.OldestDue)) {
				st.OldestDue = oldest
			}
		}
		mu.Unlock()
		progress(1)
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dead, err := in.countDead(ctx, q, now, func() { progress(1) })
	if err != nil {
		st.Failed = append(st.Failed, &PartitionError{PartitionKey: "dead_letters", Err: err})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st.DeadLetters = dead
	for _, c := range st.Shards {
		st.Total.add(c)
	}
	st.Total.add(st.Draining)
	return st, nil
}

// countPartition counts the rows of pt up to upper, from where consumers read it, or
// from its start when full.
func (in *Inspector) countPartition(ctx context.Context, pt partition, now time.Time, upper uuid.UUID, full bool) (c Counts, oldest time.Time, rows int, err error) {
	s, err := in.readStarts(ctx, pt)
	if err != nil {
		return c, oldest, 0, err
	}
	groups := plan(&s)
	var from starts // where consumers' reads of each priority begin (exclusive)
	for _, g := range groups {
		for _, p := range g.Prios {
			from[p] = g.Floor
		}
	}
	if full {
		groups = []scanplan.Group{{Prios: allPriorities, Floor: shard.MinID(shard.MinIDTime)}}
	}
	for _, g := range groups {
		err = in.state.Store.Scans().Tally(ctx, pt.key, g.Prios, g.Floor, upper, in.cfg.PageSize, func(r taskrow.Row) {
			rows++
			id := r.ID
			at := shard.IDTime(id)
			cl := classify(r.Attempt, r.Retrying, at, now)
			c.count(cl)
			if cl != due && cl != dueAgain {
				return
			}
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
			if shard.CompareIDs(id, from[r.Priority]) <= 0 {
				c.BehindFloors++
			}
		})
		if err != nil {
			return Counts{}, time.Time{}, 0, fmt.Errorf("counting the rows of %s: %w", pt.key, err)
		}
	}
	return c, oldest, rows, nil
}
