package store

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/taskrow"
)

type leasing cassandra

const (
	selectFloors = `SELECT floor_bucket, floors FROM tasks WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	// floorAssignments records a swap's new floors in the lock row, in the statement that
	// releases the lock (LockRef.release).
	floorAssignments = `floor_bucket = ?, floors = floors + ?`
)

func (s leasing) Floors(ctx context.Context, key string) (map[int8]uuid.UUID, error) {
	var bucket int64
	var stored map[int8]uuid.UUID
	err := driver.Scan(ctx, s.session, driver.Statement{CQL: selectFloors, Args: []any{key, lockID}}, &bucket, &stored)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var floors map[int8]uuid.UUID
	if stored != nil {
		floors = make(map[int8]uuid.UUID, len(stored))
		for p, id := range stored {
			floors[p] = id
		}
	}
	return floors, nil
}

func (s leasing) IDs(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]RowRef, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: selectRangeIDs, Args: []any{key, prios, from, to, limit}})
	var refs []RowRef
	var prio int8
	var id uuid.UUID
	for iter.Scan(&prio, &id) {
		refs = append(refs, RowRef{Priority: prio, ID: id})
	}
	return refs, iter.Close()
}

func (s leasing) Rows(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit, pageRows, maxBytes int) ([]taskrow.Row, bool, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: selectRange, Args: []any{key, prios, from, to, limit}, PageSize: pageRows})
	return scanRows(iter, key, maxBytes)
}

func (s leasing) WriteMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error {
	batches := taskrow.Group(rows)
	return fanout.Each(len(batches), inFlight, func(i int) error {
		b := &driver.Batch{}
		for _, idx := range batches[i] {
			stmt, args := rowInsert(rows[idx], ts)
			b.Add(stmt, args...)
		}
		return s.session.ExecBatch(ctx, b)
	})
}

func (s leasing) DropMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error {
	batches := taskrow.Group(rows)
	return fanout.Each(len(batches), inFlight, func(i int) error {
		b := &driver.Batch{}
		for _, idx := range batches[i] {
			stmt, args := rowDeleteAt(rows[idx], ts)
			b.Add(stmt, args...)
		}
		return s.session.ExecBatch(ctx, b)
	})
}

func (s leasing) Swap(ctx context.Context, lk LockRef, bucket int64, floors map[int8]uuid.UUID, rows []taskrow.Row) (bool, error) {
	stored := make(map[int8]uuid.UUID, len(floors))
	for p, id := range floors {
		stored[p] = id
	}
	b := &driver.Batch{Logged: true}
	lk.release(b, floorAssignments, bucket, stored)
	for _, r := range rows {
		if r.Attempt == 0 {
			b.Add(deleteStmt, keyArgs(r)...)
		} else {
			b.Add(deleteIfExistsStmt, keyArgs(r)...)
		}
	}
	return s.session.ExecBatchCAS(ctx, b, nil)
}

func (s leasing) DeleteMarker(ctx context.Context, marker taskrow.Row) (bool, error) {
	return s.session.ExecCAS(ctx, driver.Statement{CQL: deleteIfExistsStmt, Args: keyArgs(marker)}, nil)
}

func (s leasing) DeleteMarkers(ctx context.Context, markers []taskrow.Row) (bool, error) {
	b := &driver.Batch{Logged: true}
	for _, m := range markers {
		b.Add(deleteIfExistsStmt, keyArgs(m)...)
	}
	return s.session.ExecBatchCAS(ctx, b, nil)
}

func (s leasing) ReplaceMarker(ctx context.Context, from, to taskrow.Row) (bool, error) {
	b := &driver.Batch{Logged: true}
	b.Add(deleteIfExistsStmt, keyArgs(from)...)
	stmt, args := rowInsertLWT(to)
	b.Add(stmt, args...)
	return s.session.ExecBatchCAS(ctx, b, nil)
}

func (s leasing) MarkersThere(ctx context.Context, markers []taskrow.Row) (map[uuid.UUID]bool, error) {
	there := map[uuid.UUID]bool{}
	if len(markers) == 0 {
		return there, nil
	}
	stmt := `SELECT id FROM tasks WHERE shard_key = ? AND (kind, priority, id) IN (` +
		strings.TrimSuffix(strings.Repeat("(1, ?, ?), ", len(markers)), ", ") + `)`
	args := []any{markers[0].Key}
	for _, m := range markers {
		args = append(args, m.Priority, m.ID)
	}
	iter := s.session.Iter(ctx, driver.Statement{CQL: stmt, Args: args, Mode: driver.Serial})
	var id uuid.UUID
	for iter.Scan(&id) {
		there[id] = true
	}
	return there, iter.Close()
}
