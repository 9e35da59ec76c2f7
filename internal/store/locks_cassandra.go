package store

import (
	"context"
	"errors"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/lwt"
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
func (lk LockRef) release(b *gocql.Batch, assignments string, args ...any) {
	stmt := releaseLock
	if assignments != "" {
		stmt = `UPDATE tasks SET lock_holder = null, ` + assignments + lockWhere + ` IF lock_holder = ? AND lock_token = ?`
	}
	b.Query(stmt, append(args, lk.Key, lockID, gocql.UUID(lk.Holder), lk.Token)...)
	b.Query(writeReceipt, lk.Key, gocql.UUID(lk.Holder), int(receiptTTL/time.Second))
}

func seconds(ttl time.Duration) int { return int(ttl / time.Second) }

func (s locks) Take(ctx context.Context, key string, holder uuid.UUID, token int64, expected *int64, ttl time.Duration) (bool, LockRow, error) {
	b := cql.Batch(s.session, gocql.LoggedBatch).WithContext(ctx)
	b.Query(takeLock, seconds(ttl), gocql.UUID(holder), key, lockID, expected)
	b.Query(setToken, token, key, lockID)
	b.RetryPolicy(lwt.NoRetry)
	// Not lwt.Batch: a batch that did not apply returns the stored row, which we keep.
	row := map[string]any{}
	applied, iter, err := s.session.MapExecuteBatchCAS(b, row)
	if err == nil {
		err = iter.Close()
	}
	return applied, lockRowOf(row), err
}

func (s locks) Bump(ctx context.Context, key string, token int64, expected *int64) (bool, LockRow, error) {
	return s.cas(ctx, bumpToken, token, key, lockID, expected)
}

func (s locks) Renew(ctx context.Context, lk LockRef, ttl time.Duration) (bool, LockRow, error) {
	return s.cas(ctx, renewLock, seconds(ttl), gocql.UUID(lk.Holder), lk.Key, lockID, gocql.UUID(lk.Holder), lk.Token)
}

func (s locks) Release(ctx context.Context, lk LockRef) (bool, LockRow, error) {
	return s.cas(ctx, releaseLock, lk.Key, lockID, gocql.UUID(lk.Holder), lk.Token)
}

// cas runs one conditional statement on a lock row.
func (s locks) cas(ctx context.Context, stmt string, args ...any) (bool, LockRow, error) {
	row := map[string]any{}
	applied, err := cql.Query(s.session, stmt, args...).WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(row)
	return applied, lockRowOf(row), err
}

func (s locks) Read(ctx context.Context, key string) (LockRow, error) {
	row := map[string]any{}
	err := lwt.SerialRead(s.session, cql.Query(s.session, readLock, key, lockID).WithContext(ctx)).MapScan(row)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return LockRow{}, err
	}
	return lockRowOf(row), nil
}

func (s locks) Receipt(ctx context.Context, lk LockRef) (bool, error) {
	err := lwt.SerialRead(s.session, cql.Query(s.session, readReceipt, lk.Key, gocql.UUID(lk.Holder)).
		WithContext(ctx)).Scan(new(gocql.UUID))
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// lockRowOf reads a lock row from the columns the driver returned.
func lockRowOf(row map[string]any) LockRow {
	var r LockRow
	if h, ok := row["lock_holder"].(gocql.UUID); ok {
		r.Holder = uuid.UUID(h)
	}
	if t, ok := row["lock_token"].(int64); ok {
		r.Token = &t
	}
	return r
}
