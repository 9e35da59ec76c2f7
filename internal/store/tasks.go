package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskrow"
)

type tasks struct{ session *gocql.Session }

// stmt is the statement of m, in a conditional batch or not.
func (m Mutation) stmt(conditional bool) (string, []any) {
	switch m.Op {
	case Insert:
		if conditional {
			return rowInsertLWT(m.Row)
		}
		return rowInsert(m.Row, m.Stamp)
	case Delete:
		if m.Stamp != 0 {
			return rowDeleteAt(m.Row, m.Stamp)
		}
		return deleteStmt, keyArgs(m.Row)
	case DeleteIfExists:
		return deleteIfExistsStmt, keyArgs(m.Row)
	}
	panic(fmt.Sprintf("store: mutation %d has no single statement", m.Op))
}

func (t tasks) Write(ctx context.Context, muts []Mutation) error {
	if len(muts) == 1 {
		stmt, args := muts[0].stmt(false)
		return cql.Query(t.session, stmt, args...).WithContext(ctx).Exec()
	}
	b := cql.Batch(t.session, gocql.UnloggedBatch).WithContext(ctx)
	for _, m := range muts {
		stmt, args := m.stmt(false)
		b.Query(stmt, args...)
	}
	return t.session.ExecuteBatch(b)
}

func (t tasks) Apply(ctx context.Context, muts []Mutation) (bool, error) {
	b := cql.Batch(t.session, gocql.LoggedBatch).WithContext(ctx)
	for _, m := range muts {
		if m.Op == Release {
			m.Lock.release(b, "")
			continue
		}
		stmt, args := m.stmt(true)
		b.Query(stmt, args...)
	}
	return lwt.Batch(t.session, b)
}

func (t tasks) DeleteIfExists(ctx context.Context, r taskrow.Row) (bool, error) {
	return cql.Query(t.session, deleteIfExistsStmt, keyArgs(r)...).WithContext(ctx).
		RetryPolicy(lwt.NoRetry).MapScanCAS(map[string]any{})
}

func (t tasks) Exists(ctx context.Context, r taskrow.Row) (bool, error) {
	err := lwt.SerialRead(t.session, cql.Query(t.session, selectOne, keyArgs(r)...).WithContext(ctx)).Scan(new(gocql.UUID))
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t tasks) Read(ctx context.Context, key string, priority int8, id uuid.UUID) (taskrow.Row, bool, error) {
	return t.one(cql.Query(t.session, selectRow, key, priority, gocql.UUID(id)).WithContext(ctx).Iter(), key)
}

func (t tasks) Find(ctx context.Context, key string, priorities []int8, id uuid.UUID) (taskrow.Row, bool, error) {
	return t.one(cql.Query(t.session, selectAnyPriority, key, priorities, gocql.UUID(id)).WithContext(ctx).Iter(), key)
}

func (t tasks) one(iter *gocql.Iter, key string) (taskrow.Row, bool, error) {
	rows, _, err := scanRows(iter, key, math.MaxInt)
	if err != nil || len(rows) == 0 {
		return taskrow.Row{}, false, err
	}
	return rows[0], true, nil
}
