// Package locking is the per-partition lock consumers take before they read and swap a
// partition's due tasks. It is a row (kind 0) in the partition itself, in the tasks table,
// written only with lightweight transactions, so a consumer can make its swap batch
// conditional on still holding the lock: a holder whose lock expired cannot change the
// partition. Package lock exposes the lock; this package adds what only shardq's own
// packages need: the statements that release a lock inside a caller's batch, and the
// receipts that settle such a batch.
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

	"github.com/gocql/gocql"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/taskrow"
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
	// and at least shardq.MinLockTTL, because they expire on whole seconds: a 1 s lock
	// could last next to nothing. Defaults to DefaultTTL.
	TTL time.Duration
	// Logger receives unknown-outcome events. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Locker takes per-shard locks. It is safe for concurrent use.
type Locker struct {
	session *gocql.Session
	ttl     int
	log     *slog.Logger
	// tokens caches the last fencing token seen per key, so an acquire usually needs a
	// single LWT rather than a read first.
	tokens sync.Map
}

// New returns a Locker on the tasks table of the session's keyspace.
func New(session *gocql.Session, cfg Config) (*Locker, error) {
	if session == nil {
		return nil, shardq.Invalid("session", "is nil")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < shardq.MinLockTTL || cfg.TTL%time.Second != 0 {
		return nil, shardq.Invalid("Config.TTL", "%v is not a whole number of seconds of at least %v", cfg.TTL, shardq.MinLockTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Locker{session: session, ttl: int(cfg.TTL / time.Second), log: cfg.Logger}, nil
}

const (
	where       = ` WHERE shard_key = ? AND kind = 0 AND priority = 0 AND id = ?`
	takeStmt    = `UPDATE tasks USING TTL ? SET lock_holder = ?` + where + ` IF lock_holder = null AND lock_token = ?`
	tokenStmt   = `UPDATE tasks SET lock_token = ?` + where
	renewStmt   = `UPDATE tasks USING TTL ? SET lock_holder = ?` + where + ` IF lock_holder = ? AND lock_token = ?`
	releaseStmt = `UPDATE tasks SET lock_holder = null` + where + ` IF lock_holder = ? AND lock_token = ?`
	bumpStmt    = `UPDATE tasks SET lock_token = ?` + where + ` IF lock_holder = null AND lock_token = ?`
	readStmt    = `SELECT lock_holder, lock_token FROM tasks` + where
)

// Lock is one holding of a lock.
type Lock struct {
	l      *Locker
	key    string
	holder gocql.UUID
	token  int64
}

// Key is the locked shard's partition key.
func (lk *Lock) Key() string { return lk.key }

// Token is the fencing token: greater than that of every earlier holder of this key.
func (lk *Lock) Token() int64 { return lk.token }

// Acquire takes the lock of key, or returns ErrLockHeld without waiting.
func (l *Locker) Acquire(ctx context.Context, key string) (*Lock, error) {
	if key == "" {
		return nil, shardq.Invalid("key", "is empty")
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
		case st.holder != (gocql.UUID{}):
			return nil, ErrLockHeld
		case ctx.Err() != nil:
			// Each further try would fail at once and need settling too.
			return nil, fmt.Errorf("lock: acquiring %s: %w", key, ctx.Err())
		}
		expected = st.token
	}
	return nil, ErrLockHeld
}

// try makes one attempt to take key's lock, conditioned on token expected being stored.
// It returns the lock if the attempt took the lock, else the lock's state as it stands.
func (l *Locker) try(ctx context.Context, key string, expected *int64) (*Lock, state, error) {
	lk := &Lock{l: l, key: key, holder: gocql.TimeUUID(), token: nextToken(expected)}
	var st state
	taken, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		var err error
		st, err = l.take(ctx, lk, expected)
		return st.holder == lk.holder, err
	}, func(rctx context.Context, cause error) (bool, error) {
		var err error
		st, err = l.settle(rctx, key, expected, cause)
		return st.holder == lk.holder, err
	})
	if err != nil {
		return nil, state{}, err
	}
	if st.token != nil {
		l.tokens.Store(key, *st.token)
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

// take sends the conditional batch that makes lk the holder if token expected is
// stored. It returns the lock's state: lk's own when the batch applied, the stored one
// (which the batch returns) when it did not.
func (l *Locker) take(ctx context.Context, lk *Lock, expected *int64) (state, error) {
	b := cql.Batch(l.session, gocql.LoggedBatch).WithContext(ctx)
	b.Query(takeStmt, l.ttl, lk.holder, lk.key, taskrow.LockID, expected)
	b.Query(tokenStmt, lk.token, lk.key, taskrow.LockID)
	b.RetryPolicy(lwt.NoRetry)
	// Not lwt.Batch: a batch that did not apply returns the stored row, which we keep.
	row := map[string]any{}
	applied, iter, err := l.session.MapExecuteBatchCAS(b, row)
	if err == nil {
		err = iter.Close()
	}
	switch {
	case err != nil:
		return state{}, err
	case applied:
		return state{holder: lk.holder, token: &lk.token}, nil
	}
	return stateOf(row), nil
}

func nextToken(expected *int64) int64 {
	if expected == nil {
		return 1
	}
	return *expected + 1
}

// state is the lock row as read: holder is zero and token nil when unset.
type state struct {
	holder gocql.UUID
	token  *int64
}

func stateOf(row map[string]any) state {
	var st state
	st.holder, _ = row["lock_holder"].(gocql.UUID)
	if t, ok := row["lock_token"].(int64); ok {
		st.token = &t
	}
	return st
}

// settle decides an acquire that failed with cause, conditioned on token expected; ctx
// is lwt.Apply's, which outlives the caller's. A SERIAL read finishes any round already
// under way, but a request still queued at the coordinator may run after it; such a
// straggler is conditioned on expected, so when the token has not moved, settle moves it
// (a bump without a holder) to void the straggler.
func (l *Locker) settle(ctx context.Context, key string, expected *int64, cause error) (state, error) {
	st, err := l.resolve(ctx, key, cause)
	if err != nil || st.holder != (gocql.UUID{}) || !sameToken(st.token, expected) {
		return st, err
	}
	next := nextToken(expected)
	row := map[string]any{}
	applied, err := cql.Query(l.session, bumpStmt, next, key, taskrow.LockID, expected).
		WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(row)
	switch {
	case err != nil:
		return st, fmt.Errorf("%w: %w (voiding it: %w)", ErrOutcomeUnknown, cause, err)
	case applied:
		return state{token: &next}, nil
	}
	return stateOf(row), nil // the straggler (or another taker) got there first
}

func sameToken(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// resolve reads the lock back at SERIAL after an LWT failed with cause; ctx is
// lwt.Apply's, which outlives the caller's.
func (l *Locker) resolve(ctx context.Context, key string, cause error) (state, error) {
	l.log.WarnContext(ctx, "lock LWT outcome unknown, reading back at SERIAL", "key", key, "error", cause)
	row := map[string]any{}
	err := cql.Query(l.session, readStmt, key, taskrow.LockID).WithContext(ctx).Consistency(lwt.Serial).MapScan(row)
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return state{}, fmt.Errorf("%w: %w (reading back: %w)", ErrOutcomeUnknown, cause, err)
	}
	return stateOf(row), nil
}

// Renew restarts the lock's TTL, or returns ErrLockLost if it is no longer the holder:
// it expired, whether or not another holder took the lock since.
func (lk *Lock) Renew(ctx context.Context) error {
	return lk.change(ctx, "renew", renewStmt, lk.l.ttl, lk.holder, lk.key, taskrow.LockID, lk.holder, lk.token)
}

// Release frees the lock. It returns nil when the lock is free afterwards and nobody held
// it since this holding: the release freed it, or this holding expired and nobody took
// the lock since (the two cannot be told apart once an outcome is unknown, and mean the same to
// the caller: nothing ran under another holder). It returns ErrLockLost when another
// holder took the lock since.
func (lk *Lock) Release(ctx context.Context) error {
	return lk.change(ctx, "release", releaseStmt, lk.key, taskrow.LockID, lk.holder, lk.token)
}

// change runs a renew or release conditioned on this holding still having the lock, and
// decides it from the lock's state: the row a refused LWT returns, or the row read back
// when its outcome is unknown.
func (lk *Lock) change(ctx context.Context, what, stmt string, args ...any) error {
	for range 2 {
		var st state
		applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
			row := map[string]any{}
			applied, err := cql.Query(lk.l.session, stmt, args...).WithContext(ctx).RetryPolicy(lwt.NoRetry).MapScanCAS(row)
			st = stateOf(row)
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
		case what == "release" && st.holder == (gocql.UUID{}) && sameToken(st.token, &lk.token):
			return nil
		case st.holder != lk.holder:
			return ErrLockLost
		}
		// Still ours after the read settled the round: the change did not apply, and
		// trying it once more is a fresh decision, not a blind retry.
	}
	return fmt.Errorf("lock: %s of %s failed twice while this holding still had the lock", what, lk.key)
}

// ReleaseStatement returns a conditional statement that frees the lock only while this
// holding has it. Put it in a conditional batch on the same partition to fence the
// batch's other writes: the batch applies only if this holding still has the lock.
func (lk *Lock) ReleaseStatement() (string, []any) {
	return releaseStmt, []any{lk.key, taskrow.LockID, lk.holder, lk.token}
}

// receiptTTL is how long a fenced batch's receipt lasts: far longer than settling takes
// (lwt's resolve window), short enough that compaction drops it with the partition's other
// tombstones. Receipts are kind 2 rows, which no range read of tasks (kind 1) walks.
const receiptTTL = 10 * time.Minute

const (
	receiptStmt     = `INSERT INTO tasks (shard_key, kind, priority, id) VALUES (?, 2, 0, ?) USING TTL ?`
	readReceiptStmt = `SELECT id FROM tasks WHERE shard_key = ? AND kind = 2 AND priority = 0 AND id = ?`
)

// ReceiptStatement returns a plain statement that leaves this holding's receipt in its
// partition. Put it in the batch that ReleaseStatement fences: the receipt then exists
// exactly when that batch applied, which Settle reads.
func (lk *Lock) ReceiptStatement() (string, []any) {
	return receiptStmt, []any{lk.key, lk.holder, int(receiptTTL / time.Second)}
}

// Settle decides whether a batch fenced by this holding (ReleaseStatement and
// ReceiptStatement) applied after its outcome came back unknown. Releasing the lock
// first, a new LWT, voids a straggling batch: it is conditioned on this holding still having the lock.
// After that, the receipt read at SERIAL tells, whatever other holders did since. An error
// wraps ErrOutcomeUnknown: the outcome stays unknown.
func (lk *Lock) Settle(ctx context.Context) (bool, error) {
	if err := lk.Release(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		return false, fmt.Errorf("%w: settling a batch in %s: %w", ErrOutcomeUnknown, lk.key, err)
	}
	err := cql.Query(lk.l.session, readReceiptStmt, lk.key, lk.holder).WithContext(ctx).
		Consistency(lwt.Serial).Scan(new(gocql.UUID))
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%w: reading the receipt of a batch in %s: %w", ErrOutcomeUnknown, lk.key, err)
	}
	return true, nil
}

// ReleaseStatementSetting is ReleaseStatement that also sets other columns of the lock
// row (assignments such as "a = ?, b = b + ?", bound to args), so what a fenced batch
// leaves behind is recorded by the same lightweight transaction.
func (lk *Lock) ReleaseStatementSetting(assignments string, args ...any) (string, []any) {
	stmt := `UPDATE tasks SET lock_holder = null, ` + assignments + where + ` IF lock_holder = ? AND lock_token = ?`
	return stmt, append(args, lk.key, taskrow.LockID, lk.holder, lk.token)
}

// Held reads at SERIAL whether this holding still has the lock.
func (lk *Lock) Held(ctx context.Context) (bool, error) {
	row := map[string]any{}
	err := cql.Query(lk.l.session, readStmt, lk.key, taskrow.LockID).WithContext(ctx).Consistency(lwt.Serial).MapScan(row)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock: reading %s: %w", lk.key, err)
	}
	st := stateOf(row)
	return st.holder == lk.holder && st.token != nil && *st.token == lk.token, nil
}
