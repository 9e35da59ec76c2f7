package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
)

type keys struct{ session driver.Session }

// A claim is written by UPDATE only, never INSERT: an UPDATE writes no row marker, so the
// row lives exactly as long as its two cells, which every claim writes together with one
// TTL. (Claims of earlier versions were INSERTs, whose marker could outlive cells a later
// claim rewrote with a shorter TTL; the condition on the cells ignores such a marker.)
const (
	claimStmt = `UPDATE task_keys USING TTL ? SET task_id = ?, claimed_at = ? WHERE queue = ? AND key = ?
		IF task_id = ? AND claimed_at = ?`
	keyStmt     = `SELECT task_id, claimed_at FROM task_keys WHERE queue = ? AND key = ?`
	keyTTLStmt  = `SELECT task_id, claimed_at, TTL(task_id) FROM task_keys WHERE queue = ? AND key = ?`
	releaseStmt = `DELETE FROM task_keys WHERE queue = ? AND key = ? IF task_id = ?`
)

// args are the values of c for a condition: null for a cell not set.
func (c Claim) args() []any {
	args := []any{nil, nil}
	if c.Holder != uuid.Nil {
		args[0] = c.Holder
	}
	if !c.ClaimedAt.IsZero() {
		args[1] = c.ClaimedAt
	}
	return args
}

func (k keys) Claim(ctx context.Context, queue, key string, claim Claim, ttl time.Duration, seen Claim) (bool, Claim, error) {
	row := map[string]any{}
	args := append([]any{int64(ttl / time.Second), claim.Holder, claim.ClaimedAt, queue, key}, seen.args()...)
	applied, err := k.session.ExecCAS(ctx, driver.Statement{CQL: claimStmt, Args: args}, row)
	holder, _ := row["task_id"].(uuid.UUID)
	var cur Claim
	cur.Holder = holder
	cur.ClaimedAt, _ = row["claimed_at"].(time.Time)
	return applied, cur, err
}

func (k keys) Get(ctx context.Context, queue, key string, serial bool) (Claim, error) {
	var holder uuid.UUID
	var c Claim
	err := driver.Scan(ctx, k.session, read(keyStmt, serial, queue, key), &holder, &c.ClaimedAt)
	c.Holder = holder
	return c, keyErr(err, queue, key)
}

func (k keys) GetTTL(ctx context.Context, queue, key string) (Claim, time.Duration, error) {
	var holder uuid.UUID
	var c Claim
	var left *int
	err := driver.Scan(ctx, k.session, driver.Statement{CQL: keyTTLStmt, Args: []any{queue, key}}, &holder, &c.ClaimedAt, &left)
	c.Holder = holder
	var ttl time.Duration
	if left != nil {
		ttl = time.Duration(*left) * time.Second
	}
	return c, ttl, keyErr(err, queue, key)
}

func keyErr(err error, queue, key string) error {
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return fmt.Errorf("%w: key %q of queue %q", ErrNotFound, key, queue)
	case err != nil:
		return fmt.Errorf("reading key %q of queue %q: %w", key, queue, err)
	}
	return nil
}

func (k keys) Release(ctx context.Context, queue, key string, holder uuid.UUID) error {
	_, err := k.session.ExecCAS(ctx, driver.Statement{CQL: releaseStmt, Args: []any{queue, key, holder}}, nil)
	return err
}
