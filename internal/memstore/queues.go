package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shardq/shardq/internal/store"
)

// The queues table: PRIMARY KEY (name), one row per partition.
const (
	colBucketCount = iota
	colBucketDuration
	colShardCount
	colDefaultTimeout
	colLockTTL
	colRetention
	colCreatedAt
	colQueuePaused
	colLayouts
)

type queues struct{ *client }

func queueOf(name string, r *row, sec int64) store.Queue {
	ms := func(col int) time.Duration { return time.Duration(int64Of(r.value(col, sec))) * time.Millisecond }
	return store.Queue{Name: name, BucketCount: int(int32Of(r.value(colBucketCount, sec))), BucketDuration: ms(colBucketDuration),
		ShardCount: int(int32Of(r.value(colShardCount, sec))), DefaultTimeout: ms(colDefaultTimeout), LockTTL: ms(colLockTTL),
		CompletedRetention: ms(colRetention)}
}

func (q queues) Create(ctx context.Context, qu store.Queue) (bool, store.Queue, error) {
	applied := false
	var existing store.Queue
	err := q.exec(ctx, Request{Table: "queues", Op: "Queues.Create", Key: qu.Name, Write: true, Conditional: true}, func(s *state) error {
		ballot := s.serverStamp()
		if r := s.get(s.c.queues, qu.Name, ""); r != nil && r.live(s.sec) {
			existing = queueOf(qu.Name, r, s.sec)
			return nil
		}
		applied = true
		s.apply(s.c.queues, qu.Name, op{insert: true, sets: []set{
			{colBucketCount, int32(qu.BucketCount)}, {colBucketDuration, qu.BucketDuration.Milliseconds()},
			{colShardCount, int32(qu.ShardCount)}, {colDefaultTimeout, qu.DefaultTimeout.Milliseconds()},
			{colLockTTL, qu.LockTTL.Milliseconds()}, {colRetention, qu.CompletedRetention.Milliseconds()},
			{colCreatedAt, timestamp(s.c.now())}, // toTimestamp(now()): the coordinator's time
		}}, ballot)
		return nil
	})
	if err != nil {
		return false, store.Queue{}, err
	}
	return applied, existing, nil
}

func (q queues) Get(ctx context.Context, name string) (store.Queue, error) {
	var got *store.Queue
	err := read(ctx, q.client, q.one("Queues.Get", name, true), func(s *state, r *row) store.Queue { return queueOf(name, r, s.sec) },
		func(v store.Queue) bool { got = &v; return true })
	switch {
	case err != nil:
		return store.Queue{}, err
	case got == nil:
		return store.Queue{}, fmt.Errorf("%w: queue %q", store.ErrNotFound, name)
	}
	return *got, nil
}

func (q queues) one(op, name string, serial bool) query {
	return query{req: Request{Table: "queues", Op: op, Key: name, Serial: serial}, t: q.c.queues, pk: name,
		slices: []slice{whole}, limit: math.MaxInt, pageSize: defaultPageSize}
}

// all reads every queue's row. A node scans the table in token order; names sort
// instead, which no caller relies on either way.
func (q queues) all(ctx context.Context, op string, fn func(name string, st store.QueueStatus)) error {
	type got struct {
		name string
		st   store.QueueStatus
	}
	var rows []got
	err := q.exec(ctx, Request{Table: "queues", Op: op}, func(s *state) error {
		names := make([]string, 0, len(s.c.queues.parts))
		for name := range s.c.queues.parts {
			names = append(names, name)
		}
		slices.Sort(names)
		dead := 0
		for _, name := range names {
			r := s.get(s.c.queues, name, "")
			if r == nil {
				continue
			}
			if dead += r.tombstones(s.sec); dead > s.c.threshold {
				return tooManyTombstones(false)
			}
			if r.live(s.sec) {
				rows = append(rows, got{name, statusOf(r, s.sec)})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range rows {
		fn(r.name, r.st)
	}
	return nil
}

func (q queues) Names(ctx context.Context) ([]string, error) {
	var names []string
	if err := q.all(ctx, "Queues.Names", func(name string, _ store.QueueStatus) { names = append(names, name) }); err != nil {
		return nil, err
	}
	return names, nil
}

func statusOf(r *row, sec int64) store.QueueStatus {
	return store.QueueStatus{CreatedAt: timeOf(r.value(colCreatedAt, sec)), Paused: boolOf(r.value(colQueuePaused, sec)),
		Layouts: stringOf(r.value(colLayouts, sec))}
}

func (q queues) Status(ctx context.Context, name string, serial bool) (store.QueueStatus, error) {
	var st *store.QueueStatus
	err := read(ctx, q.client, q.one("Queues.Status", name, serial), func(s *state, r *row) store.QueueStatus {
		return statusOf(r, s.sec)
	}, func(v store.QueueStatus) bool { st = &v; return true })
	switch {
	case err != nil:
		return store.QueueStatus{}, err
	case st == nil:
		return store.QueueStatus{}, fmt.Errorf("%w: queue %q", store.ErrNotFound, name)
	}
	return *st, nil
}

// StatusesOf reads each queue's status as Status does: the gate sees a request per
// queue, where a node is sent one IN read for all of them.
func (q queues) StatusesOf(ctx context.Context, names []string) (map[string]store.QueueStatus, error) {
	out := map[string]store.QueueStatus{}
	for _, name := range names {
		st, err := q.Status(ctx, name, false)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[name] = st
		}
	}
	return out, nil
}

func (q queues) Statuses(ctx context.Context) (map[string]store.QueueStatus, error) {
	out := map[string]store.QueueStatus{}
	if err := q.all(ctx, "Queues.Statuses", func(name string, st store.QueueStatus) { out[name] = st }); err != nil {
		return nil, err
	}
	return out, nil
}

func (q queues) SetPaused(ctx context.Context, name string, paused bool) (bool, error) {
	applied := false
	err := q.exec(ctx, Request{Table: "queues", Op: "Queues.SetPaused", Key: name, Write: true, Conditional: true}, func(s *state) error {
		ballot := s.serverStamp()
		if r := s.get(s.c.queues, name, ""); r == nil || !r.live(s.sec) {
			return nil
		}
		applied = true
		s.apply(s.c.queues, name, op{sets: []set{{colQueuePaused, paused}}}, ballot)
		return nil
	})
	return applied, err
}

func (q queues) SetLayouts(ctx context.Context, name, from, to string) (bool, error) {
	applied := false
	err := q.exec(ctx, Request{Table: "queues", Op: "Queues.SetLayouts", Key: name, Write: true, Conditional: true}, func(s *state) error {
		ballot := s.serverStamp()
		r := s.get(s.c.queues, name, "")
		if r == nil || !r.live(s.sec) || stringOf(r.value(colLayouts, s.sec)) != from {
			return nil
		}
		applied = true
		s.apply(s.c.queues, name, op{sets: []set{{colLayouts, to}}}, ballot)
		return nil
	})
	return applied, err
}
