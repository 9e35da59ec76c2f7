// Package lock is the per-partition lock of the shardq recipe: a row (kind 0) in the
// partition itself, in the tasks table, written only with lightweight transactions and
// held until a server-side TTL ends it, so correctness never rests on clients' clocks.
// Consumers take it before they read and swap a partition's due tasks; a process that
// needs to act on a partition alone (a migration, a repair) can take it too.
//
// Each new holder of a partition gets a fencing token one greater than the last. An LWT
// that times out has an unknown outcome: the lock reads the row back at SERIAL to settle
// it, and never retries blindly.
package lock

import (
	"context"
	"log/slog"
	"time"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/shardqtype"
)

// DefaultTTL is Config.TTL's default.
const DefaultTTL = locking.DefaultTTL

var (
	// ErrLockHeld means another holder has the lock.
	ErrLockHeld = locking.ErrLockHeld
	// ErrLockLost means this holding is no longer the lock's holder: it expired, and perhaps
	// another holder took the lock since; or a renew or release was refused twice though
	// the lock read back as this holding's, so nothing it does can be trusted to apply
	// (its TTL ends it).
	ErrLockLost = locking.ErrLockLost
	// ErrOutcomeUnknown means an LWT failed and reading the lock back failed too: the
	// lock may or may not be held by this holding. If it is, its TTL ends it.
	// consumer.ErrOutcomeUnknown matches it too.
	ErrOutcomeUnknown = locking.ErrOutcomeUnknown
)

// Config configures a Locker.
type Config struct {
	// TTL is how long a lock is held unless renewed: whole seconds, as Cassandra TTLs are,
	// and at least shardqtype.MinLockTTL, because they expire on whole seconds: a 1 s lock
	// could last next to nothing. Defaults to DefaultTTL.
	TTL time.Duration
	// Logger receives unknown-outcome events. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Locker takes per-partition locks. It is safe for concurrent use.
type Locker struct{ l *locking.Locker }

// New returns a Locker on the tasks table of the session's keyspace.
func New(d *shardqtype.Driver, cfg Config) (*Locker, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	l, err := locking.New(sessionstate.For(d, cfg.Logger).Store.Locks(), locking.Config{TTL: cfg.TTL, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Locker{l: l}, nil
}

// Acquire takes the lock of the partition key, or returns ErrLockHeld when another
// holder has it.
func (l *Locker) Acquire(ctx context.Context, key string) (*Lock, error) {
	lk, err := l.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return &Lock{lk: lk}, nil
}

// Lock is one holding of a partition's lock, from Acquire until it is released or lost.
type Lock struct{ lk *locking.Lock }

// Key is the locked partition's key.
func (lk *Lock) Key() string { return lk.lk.Key() }

// Token is the lock's fencing token: greater than every earlier holder's.
func (lk *Lock) Token() int64 { return lk.lk.Token() }

// Renew restarts the lock's TTL, or returns ErrLockLost if it is no longer the holder.
func (lk *Lock) Renew(ctx context.Context) error { return lk.lk.Renew(ctx) }

// Release frees the lock. It returns nil when the lock is free afterwards and nobody held
// it since this holding, and ErrLockLost when another holder took the lock since.
func (lk *Lock) Release(ctx context.Context) error { return lk.lk.Release(ctx) }

// Held reads at SERIAL whether this holding still has the lock.
func (lk *Lock) Held(ctx context.Context) (bool, error) { return lk.lk.Held(ctx) }
