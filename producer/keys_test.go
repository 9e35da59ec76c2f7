package producer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/producer"
)

// base is a time whose bucket is the first of setup's ring (time shard 0).
var base = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// expireClaim removes the cells of key's claim by task id, as their TTL ending would.
func expireClaim(t *testing.T, s *gocql.Session, key string, id uuid.UUID) {
	t.Helper()
	applied, err := s.Query(`DELETE task_id, claimed_at FROM task_keys WHERE queue = 'q' AND key = ? IF task_id = ?`,
		key, gocql.UUID(id)).MapScanCAS(map[string]any{})
	require.NoError(t, err)
	require.True(t, applied, "key %q is not claimed by %s", key, id)
}

func keyRows(t *testing.T, s *gocql.Session, key string) int {
	t.Helper()
	var n int
	require.NoError(t, s.Query(`SELECT count(*) FROM task_keys WHERE queue = 'q' AND key = ?`, key).Scan(&n))
	return n
}

// keyFree checks that nothing holds key: it is looked up as not found, and a task can
// take it.
func keyFree(t *testing.T, p *producer.Producer, key string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	_, err := p.GetByKey(ctx, "q", key)
	require.ErrorIs(t, err, shardq.ErrTaskNotFound)
	require.ErrorIs(t, p.CancelByKey(ctx, "q", key, producer.CancelOptions{}), shardq.ErrTaskNotFound)
	require.ErrorIs(t, p.RescheduleByKey(ctx, "q", key, producer.RescheduleOptions{}), shardq.ErrTaskNotFound)
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: "q", Key: key, Payload: []byte("x")})
	require.NoError(t, err)
	info, err := p.GetByKey(ctx, "q", key)
	require.NoError(t, err)
	require.Equal(t, id, info.ID)
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: "q", Key: key, Payload: []byte("y")})
	var dup *producer.DuplicateError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, id, dup.ExistingID)
	return id
}

// TestKeyFreeOnceItsClaimExpires: a key taken over from a finished task by a claim that
// ends before the first claim would have (here a day sooner) is free once that claim's
// cells expire: no row outlives them to block the key.
func TestKeyFreeOnceItsClaimExpires(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	p, err := producer.New(s, producer.Config{Clock: newClock()})
	require.NoError(t, err)
	ctx := context.Background()

	first, err := p.ScheduleTask(ctx, producer.Task{Queue: "q", Key: "k", Payload: []byte("x"), DueAt: base.Add(24 * time.Hour)})
	require.NoError(t, err)
	require.NoError(t, p.Cancel(ctx, first, producer.CancelOptions{}))
	second, err := p.ScheduleTask(ctx, producer.Task{Queue: "q", Key: "k", Payload: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, p.Cancel(ctx, second, producer.CancelOptions{}))
	expireClaim(t, s, "k", second)
	third := keyFree(t, p, "k")

	require.NoError(t, p.Cancel(ctx, third, producer.CancelOptions{}))
	expireClaim(t, s, "k", third)
	require.Zero(t, keyRows(t, s, "k"), "a claim's row lasts exactly as long as its cells")
}

// TestLeftoverKeyRowBlocksNothing: a key row without a holder, as claims of earlier
// versions left when their cells expired before the row, leaves the key free.
func TestLeftoverKeyRowBlocksNothing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	p, err := producer.New(s, producer.Config{Clock: newClock()})
	require.NoError(t, err)
	require.NoError(t, s.Query(`INSERT INTO task_keys (queue, key) VALUES ('q', 'k') USING TTL 86400`).Exec())
	keyFree(t, p, "k")
}

// tickingClock is a test clock that moves by step at each reading once step is set:
// time passes during a call, between the steps that read it.
type tickingClock struct {
	now  atomic.Int64 // Unix nanoseconds
	step atomic.Int64
}

func newClock() *tickingClock {
	c := &tickingClock{}
	c.now.Store(base.UnixNano())
	return c
}

func (c *tickingClock) Now() time.Time {
	step := c.step.Load()
	return time.Unix(0, c.now.Add(step)-step).UTC()
}

func (c *tickingClock) Add(d time.Duration) { c.now.Add(int64(d)) }
