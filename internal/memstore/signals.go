package memstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/signal"
)

// The queue_signals table: PRIMARY KEY (queue, bucket), with a default TTL of a day.
const (
	colShards = iota
	colSlots
)

type signals struct{ *client }

func fromSlotKey(k int64) (slot, shard int) { return int(k >> 16), int(k & 0xffff) }

// Touch writes the rows of signal.Group as the Cassandra store does: one statement per queue and
// bucket, stamped by the coordinator.
func (g signals) Touch(ctx context.Context, cells []signal.Touch) error {
	for _, r := range signal.Group(cells) {
		o := op{ck: ckInt64(r.Bucket), key: []any{r.Bucket}, ttl: int32(r.TTL(g.clock()))}
		for s, v := range r.Shards {
			o.adds = append(o.adds, add{colShards, int64(s), v})
		}
		for k, v := range r.Slots {
			o.adds = append(o.adds, add{colSlots, int64(k), v})
		}
		err := g.exec(ctx, Request{Table: "queue_signals", Op: "Signals.Touch", Key: r.Queue, Write: true}, func(s *state) error {
			s.apply(s.c.signals, r.Queue, o, s.serverStamp())
			return nil
		})
		if driver.Refused(err) {
			err = fmt.Errorf("%w: %w", signal.ErrRefused, err)
		}
		if err != nil {
			return fmt.Errorf("signal: touching %s bucket %d: %w", r.Queue, r.Bucket, err)
		}
	}
	return nil
}

// buckets reads the rows of queue's buckets from..to.
func buckets[T any](ctx context.Context, g signals, op, queue string, from, to int64, extract func(s *state, r *row) T) ([]T, error) {
	var out []T
	q := query{req: Request{Table: "queue_signals", Op: op, Key: queue}, t: g.c.signals, pk: queue,
		slices: []slice{{lo: ckInt64(from), hi: ckInt64(to), loIn: true, hiIn: true}}, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, g.client, q, extract, func(v T) bool { out = append(out, v); return true })
	if err != nil {
		return nil, fmt.Errorf("signal: reading %s: %w", queue, err)
	}
	return out, nil
}

type bucketEntries struct {
	bucket  int64
	entries []entry
}

func (g signals) Cells(ctx context.Context, queue string, from, to int64) (map[signal.Cell]uuid.UUID, error) {
	rows, err := buckets(ctx, g, "Signals.Cells", queue, from, to, func(s *state, r *row) bucketEntries {
		return bucketEntries{r.key[0].(int64), r.entries(colShards, s.sec)}
	})
	if err != nil {
		return nil, err
	}
	cells := map[signal.Cell]uuid.UUID{}
	for _, r := range rows {
		for _, e := range r.entries {
			cells[signal.Cell{Queue: queue, Bucket: r.bucket, Shard: int(e.k)}] = e.v.(uuid.UUID)
		}
	}
	return cells, nil
}

// CellsOf reads each ring's cells as Cells does: the gate sees a request per ring, where
// a node is sent one IN read for all of them.
func (g signals) CellsOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, error) {
	cells := map[signal.Cell]uuid.UUID{}
	for _, ring := range rings {
		got, err := g.Cells(ctx, ring, from, to)
		if err != nil {
			return nil, err
		}
		maps.Copy(cells, got)
	}
	return cells, nil
}

// CellsAndTouchesOf reads each ring's cells as Cells does, then its slots as LastTouches
// does: the gate sees two requests per ring, where Cassandra serves one.
func (g signals) CellsAndTouchesOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	cells, slots, touched := map[signal.Cell]uuid.UUID{}, map[signal.Cell]signal.Slots{}, map[signal.Entry]time.Time{}
	for _, ring := range rings {
		c, err := g.Cells(ctx, ring, from, to)
		if err != nil {
			return nil, nil, nil, err
		}
		s, t, err := g.LastTouches(ctx, ring, from, to)
		if err != nil {
			return nil, nil, nil, err
		}
		maps.Copy(cells, c)
		maps.Copy(slots, s)
		maps.Copy(touched, t)
	}
	return cells, slots, touched, nil
}

func (g signals) LastTouches(ctx context.Context, queue string, from, to int64) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	rows, err := buckets(ctx, g, "Signals.LastTouches", queue, from, to, func(s *state, r *row) bucketEntries {
		return bucketEntries{r.key[0].(int64), r.entries(colSlots, s.sec)}
	})
	if err != nil {
		return nil, nil, err
	}
	cells, touched := map[signal.Cell]signal.Slots{}, map[signal.Entry]time.Time{}
	for _, r := range rows {
		for _, e := range r.entries {
			slot, sh := fromSlotKey(e.k)
			en := signal.Entry{Cell: signal.Cell{Queue: queue, Bucket: r.bucket, Shard: sh}, Slot: slot}
			if cells[en.Cell] == nil {
				cells[en.Cell] = signal.Slots{}
			}
			cells[en.Cell][slot] = e.v.(uuid.UUID)
			touched[en] = time.UnixMicro(e.ts)
		}
	}
	return cells, touched, nil
}

// The queue_passes table: PRIMARY KEY (queue), with a default TTL of a day.
const (
	colPassBuckets = iota
	colPassMadeAt
)

func (g signals) Passed(ctx context.Context, ring string) (map[int]int64, time.Time, error) {
	type got struct {
		mark map[int]int64
		at   time.Time
	}
	var out *got
	q := query{req: Request{Table: "queue_passes", Op: "Signals.Passed", Key: ring}, t: g.c.passes, pk: ring,
		slices: []slice{whole}, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, g.client, q, func(s *state, r *row) got {
		m, _ := r.value(colPassBuckets, s.sec).(map[int]int64)
		return got{maps.Clone(m), timeOf(r.value(colPassMadeAt, s.sec))}
	}, func(v got) bool { out = &v; return true })
	switch {
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("store: reading the pass mark of %s: %w", ring, err)
	case out == nil:
		return nil, time.Time{}, nil
	}
	return out.mark, out.at, nil
}

// Pass writes the row as an INSERT with the client's timestamp: a frozen map is one cell.
func (g signals) Pass(ctx context.Context, ring string, mark map[int]int64, madeAt time.Time) error {
	stamp := g.clientStamp()
	err := g.exec(ctx, Request{Table: "queue_passes", Op: "Signals.Pass", Key: ring, Write: true}, func(s *state) error {
		s.apply(s.c.passes, ring, op{insert: true, ttl: s.c.passes.defaultTTL,
			sets: []set{{colPassBuckets, maps.Clone(mark)}, {colPassMadeAt, timestamp(madeAt)}}}, stamp)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: writing the pass mark of %s: %w", ring, err)
	}
	return nil
}
