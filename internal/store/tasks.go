package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/taskrow"
)

type tasks struct{ session driver.Session }

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
		return t.session.Exec(ctx, driver.Statement{CQL: stmt, Args: args})
	}
	b := &driver.Batch{}
	for _, m := range muts {
		stmt, args := m.stmt(false)
		b.Add(stmt, args...)
	}
	return t.session.ExecBatch(ctx, b)
}

func (t tasks) Apply(ctx context.Context, muts []Mutation) (bool, error) {
	b := &driver.Batch{Logged: true}
	for _, m := range muts {
		if m.Op == Release {
			m.Lock.release(b, "")
			continue
		}
		stmt, args := m.stmt(true)
		b.Add(stmt, args...)
	}
	return t.session.ExecBatchCAS(ctx, b, nil)
}

func (t tasks) DeleteIfExists(ctx context.Context, r taskrow.Row) (bool, error) {
	return t.session.ExecCAS(ctx, driver.Statement{CQL: deleteIfExistsStmt, Args: keyArgs(r)}, nil)
}

func (t tasks) Exists(ctx context.Context, r taskrow.Row) (bool, error) {
	err := driver.Scan(ctx, t.session, driver.Statement{CQL: selectOne, Args: keyArgs(r), Mode: driver.Serial}, new(uuid.UUID))
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t tasks) Read(ctx context.Context, key string, priority int8, id uuid.UUID) (taskrow.Row, bool, error) {
	return t.one(t.session.Iter(ctx, driver.Statement{CQL: selectRow, Args: []any{key, priority, id}}), key)
}

func (t tasks) Find(ctx context.Context, key string, priorities []int8, id uuid.UUID) (taskrow.Row, bool, error) {
	return t.one(t.session.Iter(ctx, driver.Statement{CQL: selectAnyPriority, Args: []any{key, priorities, id}}), key)
}

func (t tasks) one(iter driver.Iter, key string) (taskrow.Row, bool, error) {
	rows, _, err := scanRows(iter, key, math.MaxInt)
	if err != nil || len(rows) == 0 {
		return taskrow.Row{}, false, err
	}
	return rows[0], true, nil
}
