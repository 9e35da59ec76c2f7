package store

import (
	"context"
	"errors"
	"strings"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/lwt"
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
	var stored map[int8]gocql.UUID
	err := cql.Query(s.session, selectFloors, key, lockID).WithContext(ctx).Scan(&bucket, &stored)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var floors map[int8]uuid.UUID
	if stored != nil {
		floors = make(map[int8]uuid.UUID, len(stored))
		for p, id := range stored {
			floors[p] = uuid.UUID(id)
		}
	}
	return floors, nil
}

func (s leasing) IDs(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]RowRef, error) {
	iter := cql.Query(s.session, selectRangeIDs, key, prios, gocql.UUID(from), gocql.UUID(to), limit).WithContext(ctx).Iter()
	var refs []RowRef
	var prio int8
	var id gocql.UUID
	for iter.Scan(&prio, &id) {
		refs = append(refs, RowRef{Priority: prio, ID: uuid.UUID(id)})
	}
	return refs, iter.Close()
}

func (s leasing) Rows(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit, pageRows, maxBytes int) ([]taskrow.Row, bool, error) {
	iter := cql.Query(s.session, selectRange, key, prios, gocql.UUID(from), gocql.UUID(to), limit).
		WithContext(ctx).PageSize(pageRows).Iter()
	return scanRows(iter, key, maxBytes)
}

func (s leasing) WriteMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error {
	batches := taskrow.Group(rows)
	return fanout.Each(len(batches), inFlight, func(i int) error {
		b := cql.Batch(s.session, gocql.UnloggedBatch).WithContext(ctx)
		for _, idx := range batches[i] {
			stmt, args := rowInsert(rows[idx], ts)
			b.Query(stmt, args...)
		}
		return s.session.ExecuteBatch(b)
	})
}

func (s leasing) DropMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error {
	batches := taskrow.Group(rows)
	return fanout.Each(len(batches), inFlight, func(i int) error {
		b := cql.Batch(s.session, gocql.UnloggedBatch).WithContext(ctx)
		for _, idx := range batches[i] {
			stmt, args := rowDeleteAt(rows[idx], ts)
			b.Query(stmt, args...)
		}
		return s.session.ExecuteBatch(b)
	})
}

func (s leasing) Swap(ctx context.Context, lk LockRef, bucket int64, floors map[int8]uuid.UUID, rows []taskrow.Row) (bool, error) {
	stored := make(map[int8]gocql.UUID, len(floors))
	for p, id := range floors {
		stored[p] = gocql.UUID(id)
	}
	b := cql.Batch(s.session, gocql.LoggedBatch).WithContext(ctx)
	lk.release(b, floorAssignments, bucket, stored)
	for _, r := range rows {
		if r.Attempt == 0 {
			b.Query(deleteStmt, keyArgs(r)...)
		} else {
			b.Query(deleteIfExistsStmt, keyArgs(r)...)
		}
	}
	return lwt.Batch(s.session, b)
}

func (s leasing) DeleteMarker(ctx context.Context, marker taskrow.Row) (bool, error) {
	return cql.Query(s.session, deleteIfExistsStmt, keyArgs(marker)...).
		WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(map[string]any{})
}

func (s leasing) DeleteMarkers(ctx context.Context, markers []taskrow.Row) (bool, error) {
	b := cql.Batch(s.session, gocql.LoggedBatch).WithContext(ctx)
	for _, m := range markers {
		b.Query(deleteIfExistsStmt, keyArgs(m)...)
	}
	return lwt.Batch(s.session, b)
}

func (s leasing) ReplaceMarker(ctx context.Context, from, to taskrow.Row) (bool, error) {
	b := cql.Batch(s.session, gocql.LoggedBatch).WithContext(ctx)
	b.Query(deleteIfExistsStmt, keyArgs(from)...)
	stmt, args := rowInsertLWT(to)
	b.Query(stmt, args...)
	return lwt.Batch(s.session, b)
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
		args = append(args, m.Priority, gocql.UUID(m.ID))
	}
	iter := lwt.SerialRead(s.session, cql.Query(s.session, stmt, args...).WithContext(ctx)).Iter()
	var id gocql.UUID
	for iter.Scan(&id) {
		there[uuid.UUID(id)] = true
	}
	return there, iter.Close()
}
