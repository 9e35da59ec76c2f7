package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardq/shardq/internal/driver"
)

type queues struct{ session driver.Session }

const createQueueStmt = `INSERT INTO queues (name, bucket_count, bucket_duration_ms, shard_count,
	default_timeout_ms, lock_ttl_ms, completed_retention_ms, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, toTimestamp(now())) IF NOT EXISTS`

func (s queues) Create(ctx context.Context, q Queue) (bool, Queue, error) {
	existing := map[string]any{}
	applied, err := s.session.ExecCAS(ctx, driver.Statement{CQL: createQueueStmt, Args: []any{q.Name, q.BucketCount, q.BucketDuration.Milliseconds(), q.ShardCount,
		q.DefaultTimeout.Milliseconds(), q.LockTTL.Milliseconds(), q.CompletedRetention.Milliseconds()}}, existing)
	return applied, queueOf(existing), err
}

func (s queues) Get(ctx context.Context, name string) (Queue, error) {
	row := map[string]any{}
	err := driver.MapScan(ctx, s.session, driver.Statement{CQL: `SELECT * FROM queues WHERE name = ?`, Args: []any{name}, Mode: driver.Serial}, row)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return Queue{}, fmt.Errorf("%w: queue %q", ErrNotFound, name)
	case err != nil:
		return Queue{}, err
	}
	return queueOf(row), nil
}

func queueOf(r map[string]any) Queue {
	ms := func(k string) time.Duration { v, _ := r[k].(int64); return time.Duration(v) * time.Millisecond }
	name, _ := r["name"].(string)
	bc, _ := r["bucket_count"].(int)
	sc, _ := r["shard_count"].(int)
	return Queue{Name: name, BucketCount: bc, BucketDuration: ms("bucket_duration_ms"), ShardCount: sc,
		DefaultTimeout: ms("default_timeout_ms"), LockTTL: ms("lock_ttl_ms"), CompletedRetention: ms("completed_retention_ms")}
}

func (s queues) Names(ctx context.Context) ([]string, error) {
	iter := s.session.Iter(ctx, driver.Statement{CQL: `SELECT name FROM queues`})
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

func (s queues) Status(ctx context.Context, name string, serial bool) (QueueStatus, error) {
	var st QueueStatus
	var paused *bool // null: never paused
	err := driver.Scan(ctx, s.session, read(`SELECT created_at, paused, layouts FROM queues WHERE name = ?`, serial, name),
		&st.CreatedAt, &paused, &st.Layouts)
	if errors.Is(err, driver.ErrNotFound) {
		return QueueStatus{}, fmt.Errorf("%w: queue %q", ErrNotFound, name)
	}
	st.Paused = paused != nil && *paused
	return st, err
}

func (s queues) Statuses(ctx context.Context) (map[string]QueueStatus, error) {
	return scanStatuses(s.session.Iter(ctx, driver.Statement{CQL: `SELECT name, created_at, paused, layouts FROM queues`}))
}

func (s queues) StatusesOf(ctx context.Context, names []string) (map[string]QueueStatus, error) {
	return scanStatuses(s.session.Iter(ctx, driver.Statement{CQL: `SELECT name, created_at, paused, layouts FROM queues WHERE name IN ?`, Args: []any{names}}))
}

// scanStatuses reads the rows of a query of statuses, by name.
func scanStatuses(iter driver.Iter) (map[string]QueueStatus, error) {
	out := map[string]QueueStatus{}
	var name, layouts string
	var at time.Time
	var paused *bool
	for iter.Scan(&name, &at, &paused, &layouts) {
		out[name] = QueueStatus{CreatedAt: at, Paused: paused != nil && *paused, Layouts: layouts}
		paused, layouts = nil, ""
	}
	if err := iter.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (s queues) SetPaused(ctx context.Context, name string, paused bool) (bool, error) {
	return s.session.ExecCAS(ctx, driver.Statement{CQL: `UPDATE queues SET paused = ? WHERE name = ? IF EXISTS`, Args: []any{paused, name}}, nil)
}

func (s queues) SetLayouts(ctx context.Context, name, from, to string) (bool, error) {
	var seen any // null matches a queue that never changed its layout
	if from != "" {
		seen = from
	}
	// Not IF EXISTS, which takes no other condition: shard_count is set in every queue's
	// row, so a condition on it keeps the update from making a row.
	return s.session.ExecCAS(ctx, driver.Statement{CQL: `UPDATE queues SET layouts = ? WHERE name = ? IF shard_count != null AND layouts = ?`, Args: []any{to, name, seen}}, nil)
}
