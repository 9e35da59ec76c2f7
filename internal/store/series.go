package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
)

type series struct{ session driver.Session }

const (
	seriesColumns = `spec, version, paused, done, seq, open, task_id, nominal_ns, priority, stamp, catch_up, advanced_at, created_at, written`
	seriesSet     = `SET spec = ?, version = ?, paused = ?, done = ?, seq = ?, open = ?, task_id = ?, nominal_ns = ?,
	priority = ?, stamp = ?, catch_up = ?, advanced_at = ?, created_at = ? WHERE queue = ? AND name = ?`
)

func (s series) Get(ctx context.Context, queue, name string, serial bool) (SeriesRow, error) {
	r := SeriesRow{Queue: queue, Name: name}
	var taskID, written uuid.UUID
	var nominal int64
	err := driver.Scan(ctx, s.session, read(`SELECT `+seriesColumns+` FROM series WHERE queue = ? AND name = ?`, serial, queue, name),
		&r.Spec, &r.Version, &r.Paused, &r.Done, &r.Seq, &r.Open, &taskID, &nominal, &r.Priority,
		&r.Stamp, &r.CatchUp, &r.AdvancedAt, &r.CreatedAt, &written)
	switch {
	case errors.Is(err, driver.ErrNotFound) || (err == nil && r.Version == 0):
		// A row with no version holds only a Written cell that outlived a delete.
		return r, fmt.Errorf("%w: series %s in queue %s", ErrNotFound, name, queue)
	case err != nil:
		return r, err
	}
	r.TaskID, r.Written = taskID, written
	if nominal != 0 {
		r.Nominal = time.Unix(0, nominal)
	}
	return r, nil
}

func (s series) NamesOf(ctx context.Context, queues []string) (map[string][]string, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: `SELECT queue, name FROM series_names WHERE queue IN ?`, Args: []any{queues}})
	names := make(map[string][]string, len(queues))
	var queue, name string
	for iter.Scan(&queue, &name) {
		names[queue] = append(names[queue], name)
	}
	if err := iter.Close(); err != nil {
		return nil, err
	}
	return names, nil
}

func (s series) Names(ctx context.Context, queue string) ([]string, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: `SELECT name FROM series_names WHERE queue = ?`, Args: []any{queue}})
	var names []string
	var name string
	for iter.Scan(&name) {
		names = append(names, name)
	}
	if err := iter.Close(); err != nil {
		return nil, err
	}
	return names, nil
}

func (s series) AddName(ctx context.Context, queue, name string, stamp int64) error {
	return s.session.Exec(ctx, driver.Statement{CQL: `INSERT INTO series_names (queue, name) VALUES (?, ?) USING TIMESTAMP ?`, Args: []any{queue, name, stamp}})
}

func (s series) DeleteName(ctx context.Context, queue, name string, stamp int64) error {
	return s.session.Exec(ctx, driver.Statement{CQL: `DELETE FROM series_names USING TIMESTAMP ? WHERE queue = ? AND name = ?`, Args: []any{stamp, queue, name}})
}

func (s series) Put(ctx context.Context, r SeriesRow, from int64) (bool, error) {
	var nominal int64
	if !r.Nominal.IsZero() {
		nominal = r.Nominal.UnixNano()
	}
	args := []any{r.Spec, r.Version, r.Paused, r.Done, r.Seq, r.Open, r.TaskID, nominal,
		r.Priority, r.Stamp, r.CatchUp, r.AdvancedAt, r.CreatedAt, r.Queue, r.Name}
	stmt := `UPDATE series ` + seriesSet + ` IF version = null`
	if from != 0 {
		stmt, args = `UPDATE series `+seriesSet+` IF version = ?`, append(args, from)
	}
	return s.cas(ctx, stmt, args...)
}

func (s series) Delete(ctx context.Context, queue, name string, version int64) (bool, error) {
	return s.cas(ctx, `DELETE FROM series WHERE queue = ? AND name = ? IF version = ?`, queue, name, version)
}

func (s series) cas(ctx context.Context, stmt string, args ...any) (bool, error) {
	return s.session.ExecCAS(ctx, driver.Statement{CQL: stmt, Args: args}, nil)
}

func (s series) MarkWritten(ctx context.Context, queue, name string, id uuid.UUID, stamp int64) error {
	return s.session.Exec(ctx, driver.Statement{CQL: `UPDATE series USING TIMESTAMP ? SET written = ? WHERE queue = ? AND name = ?`, Args: []any{stamp, id, queue, name}})
}
