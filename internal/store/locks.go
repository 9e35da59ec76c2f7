package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// LockRow is a partition's lock row (kind 0) as stored: Holder is zero when nobody holds
// the lock, Token nil when no holder ever took it.
type LockRow struct {
	Holder uuid.UUID
	Token  *int64
}

// LockRef is one holding of a partition's lock (a locking.Lock's Ref): the batches the
// store applies release it, conditioned on its still holding Key.
type LockRef struct {
	Key    string
	Holder uuid.UUID
	Token  int64
}

// Locks is the partition lock: the lock row of each partition of the tasks table and the
// receipts (kind 2 rows) that fenced batches leave. Package locking decides when to take,
// renew and release, and how to settle what came back unknown; Locks only writes and
// reads the rows.
//
// Every write is conditional and never retried; its error is the driver's, so
// lwt.Definite tells a refusal from an unknown outcome, which the caller settles by Read.
// A write that did not apply returns the lock row as it stands.
type Locks interface {
	// Take makes holder the holder of key's lock for ttl with token, if nobody holds it
	// and its stored token is expected (nil: none), in one conditional batch.
	Take(ctx context.Context, key string, holder uuid.UUID, token int64, expected *int64, ttl time.Duration) (bool, LockRow, error)
	// Bump sets key's token to token, if nobody holds the lock and its stored token is
	// expected (nil: none).
	Bump(ctx context.Context, key string, token int64, expected *int64) (bool, LockRow, error)
	// Renew makes lk's holding last ttl from now, if it still holds its lock.
	Renew(ctx context.Context, lk LockRef, ttl time.Duration) (bool, LockRow, error)
	// Release frees lk's lock, if lk still holds it.
	Release(ctx context.Context, lk LockRef) (bool, LockRow, error)
	// Read reads key's lock row at SERIAL, completing any change in flight; the zero
	// LockRow when there is none.
	Read(ctx context.Context, key string) (LockRow, error)
	// Receipt reads at SERIAL whether a batch that released lk (Tasks.Apply's Release,
	// Leasing.Swap) left its receipt: it did exactly when that batch applied.
	Receipt(ctx context.Context, lk LockRef) (bool, error)
}
