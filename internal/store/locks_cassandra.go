package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
)

type locks cassandra

const (
	lockWhere   = ` WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	takeLock    = `UPDATE tasks USING TTL ? SET lock_holder = ?` + lockWhere + ` IF lock_holder = null AND lock_token = ?`
	setToken    = `UPDATE tasks SET lock_token = ?` + lockWhere
	renewLock   = `UPDATE tasks USING TTL ? SET lock_holder = ?` + lockWhere + ` IF lock_holder = ? AND lock_token = ?`
	releaseLock = `UPDATE tasks SET lock_holder = null` + lockWhere + ` IF lock_holder = ? AND lock_token = ?`
	bumpToken   = `UPDATE tasks SET lock_token = ?` + lockWhere + ` IF lock_holder = null AND lock_token = ?`
	readLock    = `SELECT lock_holder, lock_token FROM tasks` + lockWhere

	writeReceipt = `INSERT INTO tasks (shard_key, kind, priority, id) VALUES (?, 2, 0, ?) USING TTL ?`
	readReceipt  = `SELECT id FROM tasks WHERE shard_key = ? AND kind = 2 AND priority = 0 AND id = ?`
)

// receiptTTL is how long a fenced batch's receipt lasts: far longer than settling takes
// (lwt's resolve window), short enough that compaction drops it with the partition's other
// tombstones. Receipts are kind 2 rows, which no range read of tasks (kind 1) walks.
const receiptTTL = 10 * time.Minute

// release adds to b the conditional release of lk, also setting assignments (such as
// "a = ?, b = b + ?", bound to args) in the lock row when there are any, so the same
// lightweight transaction records them, and lk's receipt: the batch applies only while
// lk holds its lock, and leaves the receipt exactly when it applies.
func (lk LockRef) release(b *driver.Batch, assignments string, args ...any) {
	stmt := releaseLock
	if assignments != "" {
		stmt = `UPDATE tasks SET lock_holder = null, ` + assignments + lockWhere + ` IF lock_holder = ? AND lock_token = ?`
	}
	b.Add(stmt, append(args, lk.Key, lockID, lk.Holder, lk.Token)...)
	b.Add(writeReceipt, lk.Key, lk.Holder, int(receiptTTL/time.Second))
}

func seconds(ttl time.Duration) int { return int(ttl / time.Second) }

func (s locks) Take(ctx context.Context, key string, holder uuid.UUID, token int64, expected *int64, ttl time.Duration) (bool, LockRow, error) {
	b := &driver.Batch{Logged: true}
	b.Add(takeLock, seconds(ttl), holder, key, lockID, expected)
	b.Add(setToken, token, key, lockID)
	// A batch that did not apply returns the stored row, which we keep.
	row := map[string]any{}
	applied, err := s.session.ExecBatchCAS(ctx, b, row)
	return applied, lockRowOf(row), err
}

func (s locks) Bump(ctx context.Context, key string, token int64, expected *int64) (bool, LockRow, error) {
	return s.cas(ctx, bumpToken, token, key, lockID, expected)
}

func (s locks) Renew(ctx context.Context, lk LockRef, ttl time.Duration) (bool, LockRow, error) {
	return s.cas(ctx, renewLock, seconds(ttl), lk.Holder, lk.Key, lockID, lk.Holder, lk.Token)
}

func (s locks) Release(ctx context.Context, lk LockRef) (bool, LockRow, error) {
	return s.cas(ctx, releaseLock, lk.Key, lockID, lk.Holder, lk.Token)
}

// cas runs one conditional statement on a lock row.
func (s locks) cas(ctx context.Context, stmt string, args ...any) (bool, LockRow, error) {
	row := map[string]any{}
	applied, err := s.session.ExecCAS(ctx, driver.Statement{CQL: stmt, Args: args}, row)
	return applied, lockRowOf(row), err
}

func (s locks) Read(ctx context.Context, key string) (LockRow, error) {
	row := map[string]any{}
	err := driver.MapScan(ctx, s.session, driver.Statement{CQL: readLock, Args: []any{key, lockID}, Mode: driver.Serial}, row)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return LockRow{}, err
	}
	return lockRowOf(row), nil
}

func (s locks) Receipt(ctx context.Context, lk LockRef) (bool, error) {
	err := driver.Scan(ctx, s.session, driver.Statement{CQL: readReceipt, Args: []any{lk.Key, lk.Holder}, Mode: driver.Serial}, new(uuid.UUID))
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// lockRowOf reads a lock row from the columns the driver returned.
func lockRowOf(row map[string]any) LockRow {
	var r LockRow
	if h, ok := row["lock_holder"].(uuid.UUID); ok {
		r.Holder = h
	}
	if t, ok := row["lock_token"].(int64); ok {
		r.Token = &t
	}
	return r
}
