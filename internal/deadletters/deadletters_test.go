package deadletters_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
)

// The schema keeps letters for Retention, so their partitions span Days days.
func TestDaysCoverRetention(t *testing.T) {
	t.Parallel()
	require.Equal(t, 31, deadletters.Days)
	at := time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC)
	require.Equal(t, deadletters.Day(at), deadletters.Day(at.Add(-23*time.Hour)))
	require.Equal(t, deadletters.Day(at)-1, deadletters.Day(at.Add(-24*time.Hour)))
}

// Letters are paged newest first across daily partitions, found by ID, deleted and
// counted.
func TestPageAcrossDays(t *testing.T) {
	t.Parallel()
	d := store.Of(gocqlv1.New(cassandratest.SchemaSession(t))).DeadLetters()
	ctx := context.Background()
	now := time.Now().UTC()
	var ids []uuid.UUID // oldest first
	for _, ago := range []time.Duration{72 * time.Hour, 49 * time.Hour, 48 * time.Hour, time.Minute, time.Second} {
		died := now.Add(-ago)
		l := deadletters.Letter{ID: shard.NewID(died), TaskID: shard.NewID(died), Queue: "q", Payload: []byte("p"),
			Priority: 3, DueAt: died, Timeout: time.Second, Attempt: 25, Deliveries: 25, Error: "boom", DiedAt: died}
		require.NoError(t, d.Write(ctx, l))
		ids = append(ids, l.ID)
	}
	page, err := d.Page(ctx, "q", now, uuid.Nil, 3)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[4], ids[3], ids[2]}, idsOf(page))
	rest, err := d.Page(ctx, "q", now, page[2].ID, 10)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[1], ids[0]}, idsOf(rest))
	require.Equal(t, "boom", rest[0].Error)
	require.Equal(t, int64(25), rest[0].Deliveries)

	got, ok, err := d.Get(ctx, "q", ids[1])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ids[1], got.ID)
	require.NoError(t, d.Delete(ctx, "q", ids[1], time.Now().UnixMicro()))
	_, ok, err = d.Get(ctx, "q", ids[1])
	require.NoError(t, err)
	require.False(t, ok)

	days := 0
	n, err := d.Count(ctx, "q", now, 100, func() { days++ })
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, deadletters.Days, days)
}

func idsOf(ls []deadletters.Letter) []uuid.UUID {
	out := make([]uuid.UUID, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}
