// Package locking is the per-partition lock consumers take before they read and swap a
// partition's due tasks. It is a row (kind 0) in the partition itself, in the tasks table,
// written only with lightweight transactions, so a consumer can make its swap batch
// conditional on still holding the lock: a holder whose lock expired cannot change the
// partition. Package lock exposes the lock; this package adds what only shardq's own
// packages need: the reference a caller's batch releases the lock by (Ref), and the
// receipts that settle such a batch. The rows are written and read by store.Locks; this
// package decides.
//
// Each new holder of a partition gets a fencing token one greater than the last. The lock
// expires by a server-side TTL on its holder cell, so correctness never rests on clients'
// clocks. An LWT that times out or fails other than definitely (lwt.Definite) has an
// unknown outcome; the lock reads the row back at SERIAL to settle it (lwt.Apply) and
// never retries blindly.
package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// DefaultTTL is Config.TTL's default.
const DefaultTTL = 3 * time.Second

var (
	// ErrLockHeld means another holder has the lock.
	ErrLockHeld = errors.New("lock: held by another holder")
	// ErrLockLost means this holding is no longer the lock's holder: it expired, and perhaps
	// another holder took the lock since.
	ErrLockLost = errors.New("lock: lock lost")
	// ErrOutcomeUnknown means an LWT failed and reading the lock back failed too: the
	// lock may or may not be held by this holding. If it is, its TTL ends it. It is
	// lwt.ErrOutcomeUnknown, so consumer.ErrOutcomeUnknown matches it too.
	ErrOutcomeUnknown = lwt.ErrOutcomeUnknown
)

// Config configures a Locker.
type Config struct {
	// TTL is how long a holding lasts unless renewed: whole seconds, as Cassandra TTLs are,
	// and at least shardqtype.MinLockTTL, because they expire on whole seconds: a 1 s lock
	// could last next to nothing. Defaults to DefaultTTL.
	TTL time.Duration
	// Logger receives unknown-outcome events. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Locker takes per-shard locks. It is safe for concurrent use.
type Locker struct {
	locks store.Locks
	ttl   time.Duration
	log   *slog.Logger
	// tokens caches the last fencing token seen per key, so an acquire usually needs a
	// single LWT rather than a read first.
	tokens sync.Map
}

// New returns a Locker on locks.
func New(locks store.Locks, cfg Config) (*Locker, error) {
	if locks == nil {
		return nil, defaults.Invalid("locks", "is nil")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < shardqtype.MinLockTTL || cfg.TTL%time.Second != 0 {
		return nil, defaults.Invalid("Config.TTL", "%v is not a whole number of seconds of at least %v", cfg.TTL, shardqtype.MinLockTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Locker{locks: locks, ttl: cfg.TTL, log: cfg.Logger}, nil
}

// Lock is one holding of a lock.
type Lock struct {
	l      *Locker
	key    string
	holder uuid.UUID
	token  int64
}

// Ref names this holding for the store's batches that release it (store.Release,
// store.Leasing.Swap): they apply only while it still has the lock, and leave its receipt,
// which Settle reads.
func (lk *Lock) Ref() store.LockRef {
	return store.LockRef{Key: lk.key, Holder: lk.holder, Token: lk.token}
}

// Key is the locked shard's partition key.
func (lk *Lock) Key() string { return lk.key }

// Token is the fencing token: greater than that of every earlier holder of this key.
func (lk *Lock) Token() int64 { return lk.token }

// Acquire takes the lock of key, or returns ErrLockHeld without waiting.
func (l *Locker) Acquire(ctx context.Context, key string) (*Lock, error) {
	if key == "" {
		return nil, defaults.Invalid("key", "is empty")
	}
	expected := l.cachedToken(key)
	// The token moves under us only when others acquire in between; a few tries cover a
	// stale cache, and persistent movement means the lock is busy.
	for range 3 {
		lk, st, err := l.try(ctx, key, expected)
		switch {
		case err != nil:
			return nil, fmt.Errorf("lock: acquiring %s: %w", key, err)
		case lk != nil:
			return lk, nil
		case st.Holder != uuid.Nil:
			return nil, ErrLockHeld
		case ctx.Err() != nil:
			// Each further try would fail at once and need settling too.
			return nil, fmt.Errorf("lock: acquiring %s: %w", key, ctx.Err())
		}
		expected = st.Token
	}
	return nil, ErrLockHeld
}

// try makes one attempt to take key's lock, conditioned on token expected being stored.
// It returns the lock if the attempt took the lock, else the lock's state as it stands.
func (l *Locker) try(ctx context.Context, key string, expected *int64) (*Lock, store.LockRow, error) {
	// A receipt's id is the holder, in a timeuuid column.
	lk := &Lock{l: l, key: key, holder: shard.NewID(time.Now()), token: nextToken(expected)}
	var st store.LockRow
	taken, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		var err error
		st, err = l.take(ctx, lk, expected)
		return st.Holder == lk.holder, err
	}, func(rctx context.Context, cause error) (bool, error) {
		var err error
		st, err = l.settle(rctx, key, expected, cause)
		return st.Holder == lk.holder, err
	})
	if err != nil {
		return nil, store.LockRow{}, err
	}
	if st.Token != nil {
		l.tokens.Store(key, *st.Token)
	}
	if !taken {
		return nil, st, nil
	}
	return lk, st, nil
}

// cachedToken is the token we believe is stored for key; nil when none is.
func (l *Locker) cachedToken(key string) *int64 {
	t, ok := l.tokens.Load(key)
	if !ok {
		return nil
	}
	v := t.(int64)
	return &v
}

// take makes lk the holder if token expected is stored. It returns the lock's state:
// lk's own when it did, the stored one when it did not.
func (l *Locker) take(ctx context.Context, lk *Lock, expected *int64) (store.LockRow, error) {
	applied, st, err := l.locks.Take(ctx, lk.key, lk.holder, lk.token, expected, l.ttl)
	switch {
	case err != nil:
		return store.LockRow{}, err
	case applied:
		return store.LockRow{Holder: lk.holder, Token: &lk.token}, nil
	}
	return st, nil
}

func nextToken(expected *int64) int64 {
	if expected == nil {
		return 1
	}
	return *expected + 1
}

// settle decides an acquire that failed with cause, conditioned on token expected; ctx
// is lwt.Apply's, which outlives the caller's. A SERIAL read finishes any round already
// under way, but a request still queued at the coordinator may run after it; such a
// straggler is conditioned on expected, so when the token has not moved, settle moves it
// (a bump without a holder) to void the straggler.
func (l *Locker) settle(ctx context.Context, key string, expected *int64, cause error) (store.LockRow, error) {
	st, err := l.resolve(ctx, key, cause)
	if err != nil || st.Holder != uuid.Nil || !sameToken(st.Token, expected) {
		return st, err
	}
	next := nextToken(expected)
	applied, cur, err := l.locks.Bump(ctx, key, next, expected)
	switch {
	case err != nil:
		return st, fmt.Errorf("%w: %w (voiding it: %w)", ErrOutcomeUnknown, cause, err)
	case applied:
		return store.LockRow{Token: &next}, nil
	}
	return cur, nil // the straggler (or another taker) got there first
}

func sameToken(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// resolve reads the lock back at SERIAL after an LWT failed with cause; ctx is
// lwt.Apply's, which outlives the caller's.
func (l *Locker) resolve(ctx context.Context, key string, cause error) (store.LockRow, error) {
	l.log.WarnContext(ctx, "lock LWT outcome unknown, reading back at SERIAL", "key", key, "error", cause)
	st, err := l.locks.Read(ctx, key)
	if err != nil {
		return store.LockRow{}, fmt.Errorf("%w: %w (reading back: %w)", ErrOutcomeUnknown, cause, err)
	}
	return st, nil
}

// Renew restarts the lock's TTL, or returns ErrLockLost if it is no longer the holder:
// it expired, whether or not another holder took the lock since.
func (lk *Lock) Renew(ctx context.Context) error {
	return lk.change(ctx, "renew", func(ctx context.Context) (bool, store.LockRow, error) {
		return lk.l.locks.Renew(ctx, lk.Ref(), lk.l.ttl)
	})
}

// Release frees the lock. It returns nil when the lock is free afterwards and nobody held
// it since this holding: the release freed it, or this holding expired and nobody took
// the lock since (the two cannot be told apart once an outcome is unknown, and mean the same to
// the caller: nothing ran under another holder). It returns ErrLockLost when another
// holder took the lock since.
func (lk *Lock) Release(ctx context.Context) error {
	return lk.change(ctx, "release", func(ctx context.Context) (bool, store.LockRow, error) {
		return lk.l.locks.Release(ctx, lk.Ref())
	})
}

// change runs a renew or release conditioned on this holding still having the lock, and
// decides it from the lock's state: the row a refused LWT returns, or the row read back
// when its outcome is unknown.
func (lk *Lock) change(ctx context.Context, what string, write func(context.Context) (bool, store.LockRow, error)) error {
	for range 2 {
		var st store.LockRow
		applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
			var applied bool
			var err error
			applied, st, err = write(ctx)
			return applied, err
		}, func(rctx context.Context, cause error) (bool, error) {
			// Nothing to void: both statements are conditioned on this holding still having the lock, so a
			// straggler can apply only while the read still shows it holding.
			var err error
			st, err = lk.l.resolve(rctx, lk.key, cause)
			return false, err
		})
		switch {
		case err != nil:
			return fmt.Errorf("lock: %s of %s: %w", what, lk.key, err)
		case applied:
			return nil
		case what == "release" && st.Holder == uuid.Nil && sameToken(st.Token, &lk.token):
			return nil
		case st.Holder != lk.holder:
			return ErrLockLost
		}
		// Still ours after the read settled the round: the change did not apply, and
		// trying it once more is a fresh decision, not a blind retry.
	}
	// Refused twice by a lock that reads back as ours: nothing this holding does can be
	// trusted to apply, so its caller gives it up as it would a lost one.
	return fmt.Errorf("lock: %s of %s did not apply twice though the lock read back as this holding's: %w", what, lk.key, ErrLockLost)
}

// Settle decides whether a batch that released this holding (by its Ref) applied after
// its outcome came back unknown. Releasing the lock first, a new LWT, voids a straggling
// batch: it is conditioned on this holding still having the lock. After that, the receipt
// read at SERIAL tells, whatever other holders did since. An error wraps
// ErrOutcomeUnknown: the outcome stays unknown.
func (lk *Lock) Settle(ctx context.Context) (bool, error) {
	if err := lk.Release(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		return false, fmt.Errorf("%w: settling a batch in %s: %w", ErrOutcomeUnknown, lk.key, err)
	}
	there, err := lk.l.locks.Receipt(ctx, lk.Ref())
	if err != nil {
		return false, fmt.Errorf("%w: reading the receipt of a batch in %s: %w", ErrOutcomeUnknown, lk.key, err)
	}
	return there, nil
}

// Held reads at SERIAL whether this holding still has the lock.
func (lk *Lock) Held(ctx context.Context) (bool, error) {
	st, err := lk.l.locks.Read(ctx, lk.key)
	if err != nil {
		return false, fmt.Errorf("lock: reading %s: %w", lk.key, err)
	}
	return st.Holder == lk.holder && st.Token != nil && *st.Token == lk.token, nil
}
