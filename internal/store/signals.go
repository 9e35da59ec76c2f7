package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/signal"
)

const (
	touchStmt = `UPDATE queue_signals USING TTL ? SET shards = shards + ?, slots = slots + ? WHERE queue = ? AND bucket = ?`
	readStmt  = `SELECT bucket, shards FROM queue_signals WHERE queue = ? AND bucket >= ? AND bucket <= ?`
	// readRingsStmt reads the cells of several rings whose buckets are numbered alike
	// (their layouts' buckets are as long) in one request.
	readRingsStmt = `SELECT queue, bucket, shards FROM queue_signals WHERE queue IN ? AND bucket >= ? AND bucket <= ?`
	// Write times of a map come in the order of its keys.
	readSlotsStmt = `SELECT bucket, slots, writetime(slots) FROM queue_signals WHERE queue = ? AND bucket >= ? AND bucket <= ?`
	// readRingsAllStmt reads, of several rings, both the cells and the slots: a client's
	// watch serves its reads of cells and a sweep's read of slots with one request.
	readRingsAllStmt = `SELECT queue, bucket, shards, slots, writetime(slots) FROM queue_signals WHERE queue IN ? AND bucket >= ? AND bucket <= ?`
)

type signals struct{ session driver.Session }

// Touch writes one statement per row of signal.Group.
func (s signals) Touch(ctx context.Context, cells []signal.Touch) error {
	for _, r := range signal.Group(cells) {
		// Stamped by the coordinator: an entry must keep the touch made last in real time.
		err := s.session.Exec(ctx, driver.Statement{CQL: touchStmt, Args: []any{r.TTL(time.Now()), r.Shards, r.Slots, r.Queue, r.Bucket}, CoordinatorTime: true})
		if driver.Refused(err) {
			err = fmt.Errorf("%w: %w", signal.ErrRefused, err)
		}
		if err != nil {
			return fmt.Errorf("signal: touching %s bucket %d: %w", r.Queue, r.Bucket, err)
		}
	}
	return nil
}

func (s signals) Cells(ctx context.Context, queue string, from, to int64) (map[signal.Cell]uuid.UUID, error) {
	cells := map[signal.Cell]uuid.UUID{}
	iter := s.session.Iter(ctx, driver.Statement{CQL: readStmt, Args: []any{queue, from, to}})
	var bucket int64
	var shards map[int]uuid.UUID
	for iter.Scan(&bucket, &shards) {
		for sh, v := range shards {
			cells[signal.Cell{Queue: queue, Bucket: bucket, Shard: sh}] = v
		}
		shards = nil
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("signal: reading %s: %w", queue, err)
	}
	return cells, nil
}

func (s signals) CellsOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, error) {
	cells := map[signal.Cell]uuid.UUID{}
	iter := s.session.Iter(ctx, driver.Statement{CQL: readRingsStmt, Args: []any{rings, from, to}})
	var ring string
	var bucket int64
	var shards map[int]uuid.UUID
	for iter.Scan(&ring, &bucket, &shards) {
		for sh, v := range shards {
			cells[signal.Cell{Queue: ring, Bucket: bucket, Shard: sh}] = v
		}
		shards = nil
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("signal: reading %v: %w", rings, err)
	}
	return cells, nil
}

// LastTouches reads when each slot was last touched by the write times of the slots
// map, which coordinators stamp.
func (s signals) LastTouches(ctx context.Context, queue string, from, to int64) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: readSlotsStmt, Args: []any{queue, from, to}})
	return scanSlots(iter, queue, nil)
}

func (s signals) CellsAndTouchesOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]uuid.UUID, map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: readRingsAllStmt, Args: []any{rings, from, to}})
	cells := map[signal.Cell]uuid.UUID{}
	slots, touched, err := scanSlots(iter, "", cells)
	if err != nil {
		return nil, nil, nil, err
	}
	return cells, slots, touched, nil
}

// scanSlots reads the rows of iter, each a bucket's slots and their write times, of
// queue; or, when cells is not nil, each a ring, a bucket, its cells (into cells), its
// slots and their write times.
func scanSlots(iter driver.Iter, queue string, cells map[signal.Cell]uuid.UUID) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	slotsOf, touched := map[signal.Cell]signal.Slots{}, map[signal.Entry]time.Time{}
	var bucket int64
	var shards, cellShards map[int]uuid.UUID
	var times []int64
	dest := []any{&bucket, &shards, &times}
	if cells != nil {
		dest = []any{&queue, &bucket, &cellShards, &shards, &times}
	}
	for iter.Scan(dest...) {
		for sh, v := range cellShards {
			cells[signal.Cell{Queue: queue, Bucket: bucket, Shard: sh}] = v
		}
		keys := slices.Sorted(maps.Keys(shards))
		if len(keys) != len(times) {
			_ = iter.Close()
			return nil, nil, fmt.Errorf("signal: reading %s bucket %d: %d write times for %d slots", queue, bucket, len(times), len(keys))
		}
		for i, k := range keys {
			e := signal.EntryAt(queue, bucket, k)
			if slotsOf[e.Cell] == nil {
				slotsOf[e.Cell] = signal.Slots{}
			}
			slotsOf[e.Cell][e.Slot] = shards[k]
			touched[e] = time.UnixMicro(times[i])
		}
		shards, cellShards, times = nil, nil, nil
	}
	if err := iter.Close(); err != nil {
		return nil, nil, fmt.Errorf("signal: reading the slots of %s: %w", queue, err)
	}
	return slotsOf, touched, nil
}

func (s signals) Passed(ctx context.Context, ring string) (map[int]int64, time.Time, error) {
	var mark map[int]int64
	var at time.Time
	err := driver.Scan(ctx, s.session, driver.Statement{CQL: `SELECT buckets, made_at FROM queue_passes WHERE queue = ?`, Args: []any{ring}}, &mark, &at)
	if errors.Is(err, driver.ErrNotFound) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: reading the pass mark of %s: %w", ring, err)
	}
	return mark, at, nil
}

func (s signals) Pass(ctx context.Context, ring string, mark map[int]int64, madeAt time.Time) error {
	err := s.session.Exec(ctx, driver.Statement{CQL: `INSERT INTO queue_passes (queue, buckets, made_at) VALUES (?, ?, ?)`, Args: []any{ring, mark, madeAt}})
	if err != nil {
		return fmt.Errorf("store: writing the pass mark of %s: %w", ring, err)
	}
	return nil
}
