package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// scenarios is the suite. Each writes to its own store, so none depends on another's
// rows.
var scenarios = []Scenario{
	{"a plain write stamped ahead of the ballot survives a conditional delete", func(t *testing.T, ctx context.Context, s store.Store) {
		tasks := s.Tasks()
		now := time.Now()
		ahead, behind := taskRow(1, now, "ahead"), taskRow(1, now, "behind")
		require.NoError(t, tasks.Write(ctx, []store.Mutation{
			{Op: store.Insert, Row: ahead, Stamp: now.Add(time.Hour).UnixMicro()},
			{Op: store.Insert, Row: behind, Stamp: now.Add(-time.Hour).UnixMicro()},
		}))
		for _, r := range []taskrow.Row{ahead, behind} {
			deleted, err := tasks.DeleteIfExists(ctx, r)
			require.NoError(t, err)
			require.True(t, deleted)
		}
		got, ok, err := tasks.Read(ctx, key, 1, ahead.ID)
		require.NoError(t, err)
		require.True(t, ok, "stamped after the ballot, the insert wins")
		require.Equal(t, ahead, got)
		require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Delete, Row: ahead}}))
		there, err := tasks.Exists(ctx, ahead)
		require.NoError(t, err)
		require.True(t, there, "a plain delete stamped now loses too")
		there, err = tasks.Exists(ctx, behind)
		require.NoError(t, err)
		require.False(t, there)
	}},

	// A host whose clock trails the cluster's stamps deletes below the rows it writes at a
	// cluster stamp: a delete or drop of such a row must carry the row's stamp.
	{"a delete or drop at a row's stamp wins over it", func(t *testing.T, ctx context.Context, s store.Store) {
		key := "q:2:0"
		ahead := time.Now().Add(time.Hour).UnixMicro()
		row, marker := taskRow(1, time.Now(), "row"), taskRow(1, time.Now(), "marker")
		row.Key, marker.Key = key, key
		tasks := s.Tasks()
		require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Insert, Row: row, Stamp: ahead}}))
		require.NoError(t, s.Leasing().WriteMarkers(ctx, []taskrow.Row{marker}, ahead, 1))
		require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Delete, Row: row, Stamp: ahead}}))
		require.NoError(t, s.Leasing().DropMarkers(ctx, []taskrow.Row{marker}, ahead, 1))
		for _, r := range []taskrow.Row{row, marker} {
			there, err := tasks.Exists(ctx, r)
			require.NoError(t, err)
			require.False(t, there, r.Payload)
		}
	}},

	// The simulator's stragglers (NoResponseLate) land late with the stamps they were sent
	// with: what a write stamped before a delete does, landing after it, is what they do.
	{"a write landing after a delete stamped later stays deleted", func(t *testing.T, ctx context.Context, s store.Store) {
		key := "q:3:0"
		row := taskRow(1, time.Now(), "straggler")
		row.Key = key
		sent := time.Now().Add(-time.Second).UnixMicro()
		tasks := s.Tasks()
		require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Delete, Row: row, Stamp: sent + 1}}))
		require.NoError(t, tasks.Write(ctx, []store.Mutation{{Op: store.Insert, Row: row, Stamp: sent}}))
		there, err := tasks.Exists(ctx, row)
		require.NoError(t, err)
		require.False(t, there)
	}},

	{"headers are kept by plain and conditional writes", func(t *testing.T, ctx context.Context, s store.Store) {
		plain, gone, lwt := taskRow(1, time.Now(), "plain"), taskRow(1, time.Now(), "gone"), taskRow(2, time.Now(), "lwt")
		plain.Headers = map[string]string{"a": "1", "z": ""}
		lwt.Headers = map[string]string{"traceparent": "00-1-2-01"}
		require.NoError(t, s.Tasks().Write(ctx, insert(plain, gone)))
		applied, err := s.Tasks().Apply(ctx, []store.Mutation{{Op: store.DeleteIfExists, Row: gone}, {Op: store.Insert, Row: lwt}})
		require.NoError(t, err)
		require.True(t, applied)
		for _, want := range []taskrow.Row{plain, lwt} {
			got, ok, err := s.Tasks().Read(ctx, want.Key, want.Priority, want.ID)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, want, got)
		}
	}},

	{"a conditional batch's writes carry its ballot", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now()
		lk := store.LockRef{Key: key, Holder: holder(), Token: 1}
		applied, _, err := s.Locks().Take(ctx, key, lk.Holder, 1, nil, time.Minute)
		require.NoError(t, err)
		require.True(t, applied)
		r := taskRow(2, now, "batch")
		applied, err = s.Tasks().Apply(ctx, []store.Mutation{{Op: store.Release, Lock: lk}, {Op: store.Insert, Row: r, Stamp: 1000}})
		require.NoError(t, err)
		require.True(t, applied)
		older, newer := r, r
		older.Payload, newer.Payload = []byte("older"), []byte("newer")
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: older, Stamp: now.Add(-time.Minute).UnixMicro()}}))
		got, _, err := s.Tasks().Read(ctx, key, 2, r.ID)
		require.NoError(t, err)
		require.Equal(t, r, got, "the batch's cells are stamped by its ballot, not the 1000 asked for")
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: newer, Stamp: now.Add(time.Minute).UnixMicro()}}))
		got, _, err = s.Tasks().Read(ctx, key, 2, r.ID)
		require.NoError(t, err)
		require.Equal(t, newer, got)
	}},

	{"tasks apply, find and read", func(t *testing.T, ctx context.Context, s store.Store) {
		tasks := s.Tasks()
		now := time.Now()
		from, to := taskRow(3, now, "p"), taskRow(3, now.Add(time.Second), "p")
		from.Keyed, from.Series, from.Attempt, from.Token = true, "s", 2, 5
		null := taskRow(4, now, "")
		null.Payload = nil
		require.NoError(t, tasks.Write(ctx, insert(from, null)))
		found, ok, err := tasks.Find(ctx, key, []int8{0, 3, 9}, from.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, from, found)
		got, ok, err := tasks.Read(ctx, key, 4, null.ID)
		require.NoError(t, err)
		require.True(t, ok, "a row whose payload is null")
		require.Equal(t, null, got)
		_, ok, err = tasks.Read(ctx, key, 5, null.ID)
		require.NoError(t, err)
		require.False(t, ok)

		lk := store.LockRef{Key: key, Holder: holder(), Token: 1}
		applied, _, err := s.Locks().Take(ctx, key, lk.Holder, 1, nil, time.Minute)
		require.NoError(t, err)
		require.True(t, applied)
		move := []store.Mutation{{Op: store.Release, Lock: lk}, {Op: store.DeleteIfExists, Row: from}, {Op: store.Insert, Row: to}}
		applied, err = tasks.Apply(ctx, move)
		require.NoError(t, err)
		require.True(t, applied)
		for r, want := range map[*taskrow.Row]bool{&from: false, &to: true} {
			there, err := tasks.Exists(ctx, *r)
			require.NoError(t, err)
			require.Equal(t, want, there)
		}
		there, err := s.Locks().Receipt(ctx, lk)
		require.NoError(t, err)
		require.True(t, there)
		applied, err = tasks.Apply(ctx, move)
		require.NoError(t, err)
		require.False(t, applied, "released")
	}},

	{"lock take, renew, release and refusals", func(t *testing.T, ctx context.Context, s store.Store) {
		locks := s.Locks()
		first, second := holder(), holder()
		row, err := locks.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.LockRow{}, row)
		applied, cur, err := locks.Take(ctx, key, first, 1, token(1), 10*time.Second)
		require.NoError(t, err)
		require.False(t, applied, "no token stored")
		require.Equal(t, store.LockRow{}, cur, "a refusal on no row returns none")
		applied, cur, err = locks.Take(ctx, key, first, 1, nil, 10*time.Second)
		require.NoError(t, err)
		require.True(t, applied)
		require.Equal(t, store.LockRow{}, cur)
		held := store.LockRow{Holder: first, Token: token(1)}
		applied, cur, err = locks.Take(ctx, key, second, 2, token(1), 10*time.Second)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, held, cur)
		applied, cur, err = locks.Bump(ctx, key, 2, token(1))
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, held, cur)
		ref := store.LockRef{Key: key, Holder: first, Token: 1}
		applied, cur, err = locks.Renew(ctx, store.LockRef{Key: key, Holder: first}, 10*time.Second)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, held, cur)
		applied, _, err = locks.Renew(ctx, ref, 10*time.Second)
		require.NoError(t, err)
		require.True(t, applied)
		applied, _, err = locks.Release(ctx, ref)
		require.NoError(t, err)
		require.True(t, applied)
		applied, cur, err = locks.Release(ctx, ref)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, store.LockRow{Token: token(1)}, cur, "free, its token kept")
		applied, _, err = locks.Bump(ctx, key, 2, token(1))
		require.NoError(t, err)
		require.True(t, applied)
		row, err = locks.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.LockRow{Token: token(2)}, row)
		there, err := locks.Receipt(ctx, ref)
		require.NoError(t, err)
		require.False(t, there, "Release leaves no receipt")
		_, _, err = locks.Take(ctx, key, second, 3, token(2), -time.Second)
		require.Error(t, err, "a negative TTL")
		require.True(t, lwt.Definite(err))
	}},

	{"a lock's holding expires with its TTL", func(t *testing.T, ctx context.Context, s store.Store) {
		locks := s.Locks()
		h := holder()
		applied, _, err := locks.Take(ctx, key, h, 1, nil, time.Second)
		require.NoError(t, err)
		require.True(t, applied)
		row, err := locks.Read(ctx, key)
		require.NoError(t, err)
		// A node slow enough may have let the second pass by now.
		require.Contains(t, []uuid.UUID{h, uuid.Nil}, row.Holder)
		require.Equal(t, token(1), row.Token)
		eventually(t, "free", func() bool {
			row, err := locks.Read(ctx, key)
			require.NoError(t, err)
			return row.Holder == uuid.Nil
		})
		row, err = locks.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.LockRow{Token: token(1)}, row, "the token has no TTL")
		applied, _, err = locks.Take(ctx, key, holder(), 2, token(1), time.Minute)
		require.NoError(t, err)
		require.True(t, applied)
	}},

	{"key claims apply on the row as seen", func(t *testing.T, ctx context.Context, s store.Store) {
		keys := s.Keys()
		at := time.Now().UTC().Truncate(time.Millisecond)
		first := store.Claim{Holder: shard.NewID(at), ClaimedAt: at}
		second := store.Claim{Holder: shard.NewID(at), ClaimedAt: at.Add(time.Millisecond)}
		_, err := keys.Get(ctx, "q", "k", false)
		require.ErrorIs(t, err, store.ErrNotFound)
		applied, _, err := keys.Claim(ctx, "q", "k", first, time.Minute, store.Claim{})
		require.NoError(t, err)
		require.True(t, applied)
		applied, cur, err := keys.Claim(ctx, "q", "k", second, time.Minute, store.Claim{})
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, first, cur)
		applied, cur, err = keys.Claim(ctx, "q", "k", second, time.Minute, second)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, first, cur)
		got, left, err := keys.GetTTL(ctx, "q", "k")
		require.NoError(t, err)
		require.Equal(t, first, got)
		require.Greater(t, left, 50*time.Second)
		require.LessOrEqual(t, left, time.Minute)
		applied, _, err = keys.Claim(ctx, "q", "k", second, 0, first)
		require.NoError(t, err)
		require.True(t, applied)
		got, left, err = keys.GetTTL(ctx, "q", "k")
		require.NoError(t, err)
		require.Equal(t, second, got)
		require.Zero(t, left, "TTL 0 is none")
		require.NoError(t, keys.Release(ctx, "q", "k", first.Holder))
		got, err = keys.Get(ctx, "q", "k", true)
		require.NoError(t, err)
		require.Equal(t, second, got, "only the holder releases")
		require.NoError(t, keys.Release(ctx, "q", "k", second.Holder))
		_, err = keys.Get(ctx, "q", "k", true)
		require.ErrorIs(t, err, store.ErrNotFound)

		// A zero ClaimedAt is written as the empty value, which is not null.
		empty := store.Claim{Holder: shard.NewID(at)}
		applied, _, err = keys.Claim(ctx, "q", "e", empty, time.Minute, store.Claim{})
		require.NoError(t, err)
		require.True(t, applied)
		applied, cur, err = keys.Claim(ctx, "q", "e", second, time.Minute, store.Claim{Holder: empty.Holder})
		require.NoError(t, err)
		require.False(t, applied, "the empty claimed_at is not null")
		require.Equal(t, empty, cur)
	}},

	{"a key claim expires with its TTL", func(t *testing.T, ctx context.Context, s store.Store) {
		keys := s.Keys()
		at := time.Now().UTC().Truncate(time.Millisecond)
		c := store.Claim{Holder: shard.NewID(at), ClaimedAt: at}
		applied, _, err := keys.Claim(ctx, "q", "k", c, time.Second, store.Claim{})
		require.NoError(t, err)
		require.True(t, applied)
		eventually(t, "expired", func() bool {
			_, err := keys.Get(ctx, "q", "k", true)
			if errors.Is(err, store.ErrNotFound) {
				return true
			}
			require.NoError(t, err)
			return false
		})
		applied, _, err = keys.Claim(ctx, "q", "k", c, time.Minute, store.Claim{})
		require.NoError(t, err)
		require.True(t, applied, "no row left: no marker outlives the cells")
	}},

	{"leasing reads rows by range, limit, pages and bytes", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now()
		a, b, c := taskRow(9, now.Add(-3*time.Second), "0123456789"), taskRow(9, now.Add(-2*time.Second), "0123456789"), taskRow(9, now, "0123456789")
		d, e := taskRow(3, now.Add(-4*time.Second), "0123456789"), taskRow(3, now.Add(-time.Second), "0123456789")
		other, late := taskRow(5, now, "x"), taskRow(9, now.Add(time.Hour), "x")
		require.NoError(t, s.Tasks().Write(ctx, insert(e, late, c, a, other, d, b)))
		prios := []int8{3, 9}
		from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))
		for _, tc := range []struct {
			limit, pageRows, maxBytes int
			want                      []taskrow.Row
			cut                       bool
		}{
			{10, 2, 1000, []taskrow.Row{a, b, c, d, e}, false},
			{10, 0, 1000, []taskrow.Row{a, b, c, d, e}, false},
			{3, 2, 1000, []taskrow.Row{a, b, c}, false},
			{4, 1, 1000, []taskrow.Row{a, b, c, d}, false},
			{10, 2, 25, []taskrow.Row{a, b, c}, true},
			{10, 5, 20, []taskrow.Row{a, b}, true},
			{5, 5, 50, []taskrow.Row{a, b, c, d, e}, true},
		} {
			rows, cut, err := s.Leasing().Rows(ctx, key, prios, from, to, tc.limit, tc.pageRows, tc.maxBytes)
			require.NoError(t, err)
			require.Equal(t, tc.want, rows, "%+v", tc)
			require.Equal(t, tc.cut, cut, "%+v", tc)
		}
		rows, _, err := s.Leasing().Rows(ctx, key, prios, b.ID, c.ID, 10, 2, 1000)
		require.NoError(t, err)
		require.Equal(t, []taskrow.Row{c, e}, rows, "(from, to]")
		refs, err := s.Leasing().IDs(ctx, key, []int8{9, 3, 9}, from, to, 4)
		require.NoError(t, err)
		var want []store.RowRef
		for _, r := range []taskrow.Row{a, b, c, d} {
			want = append(want, store.RowRef{Priority: r.Priority, ID: r.ID})
		}
		require.Equal(t, want, refs)
		_, _, err = s.Leasing().Rows(ctx, key, prios, from, to, 0, 2, 1000)
		require.Error(t, err, "LIMIT 0")
		require.True(t, lwt.Definite(err))
	}},

	{"swap applies while its lock holds and its delivered rows exist", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now()
		floors, err := s.Leasing().Floors(ctx, key)
		require.NoError(t, err)
		require.Nil(t, floors)
		r0, r1 := taskRow(9, now, "0"), taskRow(9, now.Add(time.Millisecond), "1")
		r1.Attempt = 1
		require.NoError(t, s.Tasks().Write(ctx, insert(r0, r1)))
		lk := store.LockRef{Key: key, Holder: holder(), Token: 1}
		applied, _, err := s.Locks().Take(ctx, key, lk.Holder, 1, nil, time.Minute)
		require.NoError(t, err)
		require.True(t, applied)
		floors, err = s.Leasing().Floors(ctx, key)
		require.NoError(t, err)
		require.Nil(t, floors, "a lock row with no floors")
		applied, err = s.Leasing().Swap(ctx, lk, 7, map[int8]uuid.UUID{9: r1.ID}, []taskrow.Row{r0, r1})
		require.NoError(t, err)
		require.True(t, applied)
		there, err := s.Leasing().MarkersThere(ctx, []taskrow.Row{r0, r1})
		require.NoError(t, err)
		require.Empty(t, there)
		floors, err = s.Leasing().Floors(ctx, key)
		require.NoError(t, err)
		require.Equal(t, map[int8]uuid.UUID{9: r1.ID}, floors)
		ok, err := s.Locks().Receipt(ctx, lk)
		require.NoError(t, err)
		require.True(t, ok)
		row, err := s.Locks().Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.LockRow{Token: token(1)}, row)
		applied, err = s.Leasing().Swap(ctx, lk, 7, nil, nil)
		require.NoError(t, err)
		require.False(t, applied, "released")

		next := store.LockRef{Key: key, Holder: holder(), Token: 2}
		applied, _, err = s.Locks().Take(ctx, key, next.Holder, 2, token(1), time.Minute)
		require.NoError(t, err)
		require.True(t, applied)
		gone := taskRow(3, now, "gone")
		gone.Attempt = 1
		applied, err = s.Leasing().Swap(ctx, next, 8, map[int8]uuid.UUID{3: gone.ID}, []taskrow.Row{gone})
		require.NoError(t, err)
		require.False(t, applied, "a delivered row is gone")
		row, err = s.Locks().Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.LockRow{Holder: next.Holder, Token: token(2)}, row)
		gone.Attempt = 0
		applied, err = s.Leasing().Swap(ctx, next, 8, map[int8]uuid.UUID{3: gone.ID}, []taskrow.Row{gone})
		require.NoError(t, err)
		require.True(t, applied, "a row never delivered is deleted unconditionally")
		floors, err = s.Leasing().Floors(ctx, key)
		require.NoError(t, err)
		require.Equal(t, map[int8]uuid.UUID{9: r1.ID, 3: gone.ID}, floors, "floors add up")
	}},

	{"markers", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now()
		m1, m2, m4 := taskRow(1, now, "1"), taskRow(1, now.Add(time.Second), "2"), taskRow(1, now.Add(2*time.Second), "4")
		m3 := taskRow(1, now, "3")
		m3.Key = "q:1:0"
		require.NoError(t, s.Leasing().WriteMarkers(ctx, []taskrow.Row{m1, m3, m2}, now.UnixMicro(), 2))
		there, err := s.Leasing().MarkersThere(ctx, []taskrow.Row{m2, m1, m4})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]bool{m1.ID: true, m2.ID: true}, there)
		for _, want := range []bool{true, false} {
			deleted, err := s.Leasing().DeleteMarker(ctx, m1)
			require.NoError(t, err)
			require.Equal(t, want, deleted)
		}
		applied, err := s.Leasing().DeleteMarkers(ctx, []taskrow.Row{m2, m1})
		require.NoError(t, err)
		require.False(t, applied, "m1 is gone")
		applied, err = s.Leasing().ReplaceMarker(ctx, m2, m4)
		require.NoError(t, err)
		require.True(t, applied)
		applied, err = s.Leasing().ReplaceMarker(ctx, m2, m4)
		require.NoError(t, err)
		require.False(t, applied)
		there, err = s.Leasing().MarkersThere(ctx, []taskrow.Row{m2, m4})
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]bool{m4.ID: true}, there)
		// m4 was written by a conditional batch, stamped by its ballot: dropped past it.
		require.NoError(t, s.Leasing().DropMarkers(ctx, []taskrow.Row{m4, m3}, time.Now().Add(time.Minute).UnixMicro(), 2))
		for _, m := range []taskrow.Row{m3, m4} {
			ok, err := s.Tasks().Exists(ctx, m)
			require.NoError(t, err)
			require.False(t, ok)
		}
		applied, err = s.Leasing().DeleteMarkers(ctx, []taskrow.Row{m4})
		require.NoError(t, err)
		require.False(t, applied)
	}},

	{"queues are created once", func(t *testing.T, ctx context.Context, s store.Store) {
		queues := s.Queues()
		q := store.Queue{Name: "q", BucketCount: 10, BucketDuration: time.Second, ShardCount: 2,
			DefaultTimeout: 3 * time.Second, LockTTL: 3 * time.Second, CompletedRetention: time.Minute}
		_, err := queues.Get(ctx, "q")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = queues.Status(ctx, "q", false)
		require.ErrorIs(t, err, store.ErrNotFound)
		applied, stored, err := queues.Create(ctx, q)
		require.NoError(t, err)
		require.True(t, applied)
		require.Equal(t, store.Queue{}, stored)
		other := q
		other.ShardCount = 4
		applied, stored, err = queues.Create(ctx, other)
		require.NoError(t, err)
		require.False(t, applied)
		require.Equal(t, q, stored)
		got, err := queues.Get(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, q, got)
		r := q
		r.Name = "r"
		applied, _, err = queues.Create(ctx, r)
		require.NoError(t, err)
		require.True(t, applied)
		names, err := queues.Names(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"q", "r"}, names)
		st, err := queues.Status(ctx, "q", false)
		require.NoError(t, err)
		at := st.CreatedAt
		require.WithinDuration(t, time.Now(), at, time.Minute)
		require.Equal(t, at.Truncate(time.Millisecond), at)
		require.False(t, st.Paused)
		created, err := queues.Statuses(ctx)
		require.NoError(t, err)
		require.Len(t, created, 2)
		require.Equal(t, st, created["q"])
	}},

	{"a queue is paused and resumed by a conditional update of its row", func(t *testing.T, ctx context.Context, s store.Store) {
		queues := s.Queues()
		applied, err := queues.SetPaused(ctx, "q", true)
		require.NoError(t, err)
		require.False(t, applied, "no such queue: the update does not make a row")
		_, err = queues.Status(ctx, "q", false)
		require.ErrorIs(t, err, store.ErrNotFound)
		q := store.Queue{Name: "q", BucketCount: 10, BucketDuration: time.Second, ShardCount: 2,
			DefaultTimeout: 3 * time.Second, LockTTL: 3 * time.Second}
		_, _, err = queues.Create(ctx, q)
		require.NoError(t, err)
		st, err := queues.Status(ctx, "q", false)
		require.NoError(t, err)
		require.False(t, st.Paused, "a new queue runs")
		for _, want := range []bool{true, true, false, true} {
			applied, err = queues.SetPaused(ctx, "q", want)
			require.NoError(t, err)
			require.True(t, applied)
			for _, serial := range []bool{false, true} {
				st, err = queues.Status(ctx, "q", serial)
				require.NoError(t, err)
				require.Equal(t, want, st.Paused)
			}
			statuses, err := queues.Statuses(ctx)
			require.NoError(t, err)
			require.Equal(t, want, statuses["q"].Paused)
		}
		got, err := queues.Get(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, q, got, "settings are untouched")
	}},

	{"a queue's layout history is replaced only from the value last read", func(t *testing.T, ctx context.Context, s store.Store) {
		queues := s.Queues()
		applied, err := queues.SetLayouts(ctx, "q", "", "a")
		require.NoError(t, err)
		require.False(t, applied, "no such queue: the update does not make a row")
		_, err = queues.Status(ctx, "q", false)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, _, err = queues.Create(ctx, store.Queue{Name: "q", BucketCount: 10, BucketDuration: time.Second, ShardCount: 2,
			DefaultTimeout: 3 * time.Second, LockTTL: 3 * time.Second})
		require.NoError(t, err)
		st, err := queues.Status(ctx, "q", true)
		require.NoError(t, err)
		require.Empty(t, st.Layouts, "a new queue has its first layout only")
		applied, err = queues.SetLayouts(ctx, "q", "b", "c")
		require.NoError(t, err)
		require.False(t, applied, "not from what is stored")
		for _, step := range [][2]string{{"", "a"}, {"a", "ab"}} {
			applied, err = queues.SetLayouts(ctx, "q", step[0], step[1])
			require.NoError(t, err)
			require.True(t, applied)
			applied, err = queues.SetLayouts(ctx, "q", step[0], "x")
			require.NoError(t, err)
			require.False(t, applied, "a second change from the same value loses")
			for _, serial := range []bool{false, true} {
				st, err = queues.Status(ctx, "q", serial)
				require.NoError(t, err)
				require.Equal(t, step[1], st.Layouts)
			}
			statuses, err := queues.Statuses(ctx)
			require.NoError(t, err)
			require.Equal(t, step[1], statuses["q"].Layouts)
		}
		require.NoError(t, err)
	}},

	{"dead letters page newest first", func(t *testing.T, ctx context.Context, s store.Store) {
		dl := s.DeadLetters()
		now := time.Now()
		letter := func(at time.Time, payload []byte) deadletters.Letter {
			return deadletters.Letter{ID: shard.NewID(at), TaskID: shard.NewID(at), Queue: "q", Payload: payload, Priority: 3,
				DueAt: at.UTC().Truncate(time.Millisecond), Timeout: time.Second, Attempt: 2, Deliveries: 7, Error: "boom",
				DiedAt: at.UTC().Truncate(time.Millisecond)}
		}
		l1, l2, l3 := letter(now.Add(-49*time.Hour), []byte("1")), letter(now.Add(-2*time.Hour), nil), letter(now.Add(-time.Hour), []byte("3"))
		l3.Headers = map[string]string{"traceparent": "00-1-2-01", "b": ""}
		for _, l := range []deadletters.Letter{l2, l1, l3} {
			require.NoError(t, dl.Write(ctx, l))
		}
		page, err := dl.Page(ctx, "q", now, uuid.Nil, 2)
		require.NoError(t, err)
		require.Equal(t, []deadletters.Letter{l3, l2}, page)
		page, err = dl.Page(ctx, "q", now, l2.ID, 2)
		require.NoError(t, err)
		require.Equal(t, []deadletters.Letter{l1}, page)
		got, ok, err := dl.Get(ctx, "q", l1.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, l1, got)
		require.NoError(t, dl.Delete(ctx, "q", l2.ID, time.Now().UnixMicro()))
		_, ok, err = dl.Get(ctx, "q", l2.ID)
		require.NoError(t, err)
		require.False(t, ok)
		days := 0
		n, err := dl.Count(ctx, "q", now, 1, func() { days++ })
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, deadletters.Days, days)
	}},

	// A letter is stamped by a coordinator and deleted by a host (a producer's purge or
	// replay): a delete stamped by a host clock that trails the servers' is shadowed by the
	// letter, one stamped by the cluster's clock is not.
	{"a dead letter's delete at the cluster's delete stamp wins whatever the host's clock", func(t *testing.T, ctx context.Context, s store.Store) {
		dl := s.DeadLetters()
		host := trailingHost(5 * time.Second)
		cluster := clustertime.New(s, host, nil)
		_, err := cluster.Measure(ctx)
		require.NoError(t, err)
		l := deadletters.Letter{ID: shard.NewID(cluster.Now()), TaskID: shard.NewID(cluster.Now()), Queue: "q"}
		require.NoError(t, dl.Write(ctx, l))
		require.NoError(t, dl.Delete(ctx, "q", l.ID, host.Now().UnixMicro()))
		_, ok, err := dl.Get(ctx, "q", l.ID)
		require.NoError(t, err)
		require.True(t, ok, "a delete at the trailing host's time is shadowed")
		require.NoError(t, dl.Delete(ctx, "q", l.ID, cluster.DeleteStamp()))
		_, ok, err = dl.Get(ctx, "q", l.ID)
		require.NoError(t, err)
		require.False(t, ok, "a delete at the cluster's delete stamp wins")
	}},

	{"signal cells", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now()
		at := func(d time.Duration) time.Time { return now.Add(d).Truncate(100 * time.Nanosecond) }
		until := now.Add(time.Minute)
		touch := func(bucket int64, sh, slot int, earliest time.Time) signal.Touch {
			return signal.Touch{Entry: signal.Entry{Cell: signal.Cell{Queue: "q", Bucket: bucket, Shard: sh}, Slot: slot}, Earliest: earliest, Until: until}
		}
		require.NoError(t, s.Signals().Touch(ctx, []signal.Touch{touch(5, 0, 1, at(time.Second)), touch(5, 0, 0, at(0)),
			touch(5, 1, 3, at(3*time.Second)), touch(6, 0, 0, at(time.Hour)), touch(9, 0, 0, at(0))}))
		cells, err := s.Signals().Cells(ctx, "q", 5, 6)
		require.NoError(t, err)
		times := map[signal.Cell]time.Time{}
		for c, v := range cells {
			times[c] = shard.IDTime(v)
		}
		require.Equal(t, map[signal.Cell]time.Time{{Queue: "q", Bucket: 5, Shard: 0}: at(0), {Queue: "q", Bucket: 5, Shard: 1}: at(3 * time.Second),
			{Queue: "q", Bucket: 6, Shard: 0}: at(time.Hour)}, times, "each shard's earliest")
		slots, touched, err := s.Signals().LastTouches(ctx, "q", 5, 5)
		require.NoError(t, err)
		require.Len(t, slots, 2)
		require.Len(t, slots[signal.Cell{Queue: "q", Bucket: 5, Shard: 0}], 2)
		require.Equal(t, at(time.Second), shard.IDTime(slots[signal.Cell{Queue: "q", Bucket: 5, Shard: 0}][1]))
		require.Len(t, touched, 3)
		for _, when := range touched {
			require.WithinDuration(t, time.Now(), when, time.Minute)
		}
		other := touch(5, 2, 4, at(4*time.Second))
		other.Queue = "r"
		require.NoError(t, s.Signals().Touch(ctx, []signal.Touch{other}))
		ofCells, ofSlots, ofTouched, err := s.Signals().CellsAndTouchesOf(ctx, []string{"q", "r"}, 5, 5)
		require.NoError(t, err)
		require.Len(t, ofCells, 3, "both rings' cells")
		require.Equal(t, at(4*time.Second), shard.IDTime(ofCells[other.Cell]), "a cell holds its last touch's row time")
		require.Len(t, ofSlots, 3, "both rings' cells")
		require.Equal(t, at(4*time.Second), shard.IDTime(ofSlots[other.Cell][4]))
		require.Len(t, ofTouched, 4)
		ofCells, err = s.Signals().CellsOf(ctx, []string{"q", "r"}, 5, 6)
		require.NoError(t, err)
		require.Len(t, ofCells, 4)
		before := cells[signal.Cell{Queue: "q", Bucket: 5, Shard: 0}]
		require.NoError(t, s.Signals().Touch(ctx, []signal.Touch{touch(5, 0, 0, at(0))}))
		cells, err = s.Signals().Cells(ctx, "q", 5, 5)
		require.NoError(t, err)
		require.NotEqual(t, before, cells[signal.Cell{Queue: "q", Bucket: 5, Shard: 0}], "every touch changes its cell")
	}},

	{"pass marks", func(t *testing.T, ctx context.Context, s store.Store) {
		mark, at, err := s.Signals().Passed(ctx, "q")
		require.NoError(t, err)
		require.Nil(t, mark, "none stored")
		require.True(t, at.IsZero())
		now := time.Now().UTC().Truncate(time.Millisecond)
		require.NoError(t, s.Signals().Pass(ctx, "q", map[int]int64{0: 7, 2: 9}, now))
		require.NoError(t, s.Signals().Pass(ctx, "q", map[int]int64{0: 8}, now.Add(time.Second)))
		mark, at, err = s.Signals().Passed(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, map[int]int64{0: 8}, mark, "a mark replaces the one before whole")
		require.True(t, now.Add(time.Second).Equal(at), "%v", at)
		mark, _, err = s.Signals().Passed(ctx, "r")
		require.NoError(t, err)
		require.Nil(t, mark, "marks are per ring")
	}},

	{"series put on the version, delete leaves written", func(t *testing.T, ctx context.Context, s store.Store) {
		series := s.Series()
		now := time.Now().UTC().Truncate(time.Millisecond)
		r := store.SeriesRow{Queue: "q", Name: "s", Spec: "{}", Version: 1, Seq: 1, Open: true, TaskID: shard.NewID(now),
			Nominal: now, Priority: 2, Stamp: now.UnixMicro(), AdvancedAt: now, CreatedAt: now}
		require.NoError(t, series.AddName(ctx, "q", "s", time.Now().UnixMicro()))
		require.NoError(t, series.AddName(ctx, "q", "a", time.Now().UnixMicro()))
		applied, err := series.Put(ctx, r, 0)
		require.NoError(t, err)
		require.True(t, applied)
		applied, err = series.Put(ctx, r, 0)
		require.NoError(t, err)
		require.False(t, applied)
		next := r
		next.Version, next.Paused = 2, true
		applied, err = series.Put(ctx, next, 2)
		require.NoError(t, err)
		require.False(t, applied)
		applied, err = series.Put(ctx, next, 1)
		require.NoError(t, err)
		require.True(t, applied)
		require.NoError(t, series.MarkWritten(ctx, "q", "s", r.TaskID, time.Now().UnixMicro()))
		got, err := series.Get(ctx, "q", "s", true)
		require.NoError(t, err)
		got.Nominal = got.Nominal.UTC()
		want := next
		want.Written = r.TaskID
		require.Equal(t, want, got)
		applied, err = series.Delete(ctx, "q", "s", 1)
		require.NoError(t, err)
		require.False(t, applied)
		applied, err = series.Delete(ctx, "q", "s", 2)
		require.NoError(t, err)
		require.True(t, applied)
		require.NoError(t, series.MarkWritten(ctx, "q", "s", shard.NewID(now), time.Now().UnixMicro()))
		_, err = series.Get(ctx, "q", "s", false)
		require.ErrorIs(t, err, store.ErrNotFound, "only written is left")
		applied, err = series.Put(ctx, r, 0)
		require.NoError(t, err)
		require.True(t, applied, "version is null again")
		names, err := series.Names(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, []string{"a", "s"}, names)
		require.NoError(t, series.AddName(ctx, "r", "b", time.Now().UnixMicro()))
		of, err := series.NamesOf(ctx, []string{"q", "r", "none"})
		require.NoError(t, err)
		require.Equal(t, map[string][]string{"q": {"a", "s"}, "r": {"b"}}, of, "a queue without series is left out")
		require.NoError(t, series.DeleteName(ctx, "q", "s", time.Now().UnixMicro()))
		names, err = series.Names(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, names)
	}},

	{"timeuuid columns take version 1 UUIDs only", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now().UTC().Truncate(time.Millisecond)
		r := store.SeriesRow{Queue: "q", Name: "s", Spec: "{}", Version: 1, CreatedAt: now}
		_, err := s.Series().Put(ctx, r, 0)
		require.Error(t, err, "a nil task_id")
		require.True(t, lwt.Definite(err))
		_, err = s.Series().Get(ctx, "q", "s", true)
		require.ErrorIs(t, err, store.ErrNotFound)
		bad := taskRow(1, now, "p")
		bad.TaskID = uuid.New()
		require.Error(t, s.Tasks().Write(ctx, insert(bad)))
		_, ok, err := s.Tasks().Read(ctx, key, 1, bad.ID)
		require.NoError(t, err)
		require.False(t, ok)
	}},

	{"index entries by write timestamp", func(t *testing.T, ctx context.Context, s store.Store) {
		idx := s.Index()
		now := time.Now()
		id := shard.NewID(now)
		loc := taskindex.Loc{Key: "q:3:1", Priority: 2, ID: shard.NewID(now)}
		sched := taskindex.Entry{TaskID: id, Key: "k", State: taskindex.Scheduled, Row: loc}
		s1 := taskindex.Stamp(id, 0, 1)
		failed, err := idx.Write(ctx, []taskindex.Write{{Entry: sched, Stamp: s1, TTL: time.Hour}}, 2)
		require.NoError(t, err)
		require.Empty(t, failed)
		got, stamp, err := idx.Read(ctx, id)
		require.NoError(t, err)
		require.Equal(t, s1, stamp)
		want := sched
		want.Queue = "q"
		require.Equal(t, want, got)

		done := taskindex.Entry{TaskID: id, Queue: "q", Key: "k", State: taskindex.Completed, Attempt: 1, Token: 1,
			DoneAt: now.UTC().Truncate(time.Millisecond)}
		s2 := taskindex.Stamp(id, 1, taskindex.Final)
		other := taskindex.Entry{TaskID: shard.NewID(now.Add(time.Hour)), State: taskindex.Scheduled, Row: loc}
		failed, err = idx.Write(ctx, []taskindex.Write{{Entry: done, Stamp: s2, TTL: time.Hour, Replace: true},
			{Entry: sched, Stamp: s1 + 1, TTL: time.Hour}, {Entry: other, Stamp: 5, TTL: time.Minute}}, 2)
		require.NoError(t, err)
		require.Empty(t, failed)
		got, stamp, err = idx.Read(ctx, id)
		require.NoError(t, err)
		require.Equal(t, s2, stamp)
		require.Equal(t, done, got, "the replace dropped the row location; the late step lost")
		got, _, err = idx.Read(ctx, other.TaskID)
		require.NoError(t, err)
		require.Equal(t, taskindex.Scheduled, got.State)
		_, err = idx.Write(ctx, []taskindex.Write{{Entry: taskindex.Entry{TaskID: id}, Stamp: s2 + 1, Delete: true}}, 1)
		require.NoError(t, err)
		_, _, err = idx.Read(ctx, id)
		require.ErrorIs(t, err, taskindex.ErrNotFound)
	}},

	{"scans read ranges without payloads", func(t *testing.T, ctx context.Context, s store.Store) {
		now := time.Now().UTC().Truncate(time.Millisecond)
		row := func(prio int8, at time.Time, attempt int, retrying bool) taskrow.Row {
			r := taskRow(prio, at, "payload")
			r.TaskID = shard.NewID(now)
			r.Attempt, r.Token, r.Keyed, r.Series, r.Retrying = attempt, int64(attempt)+4, true, "s", retrying
			return r
		}
		before, after, other := row(9, now.Add(-time.Hour), 0, false), row(3, now.Add(time.Hour), 0, false), row(5, now, 0, false)
		rows := []taskrow.Row{row(9, now, 0, false), row(9, now.Add(time.Second), 2, true), row(3, now.Add(-time.Second), 1, false)}
		all := append([]taskrow.Row{before, after, other}, rows...)
		require.NoError(t, s.Tasks().Write(ctx, insert(all...)))
		prios := []int8{9, 3}
		from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))
		var tallied []taskrow.Row
		require.NoError(t, s.Scans().Tally(ctx, key, prios, from, to, 1, func(r taskrow.Row) { tallied = append(tallied, r) }))
		require.Len(t, tallied, len(rows))
		for i, r := range rows {
			require.Equal(t, taskrow.Row{Key: key, Priority: r.Priority, ID: r.ID, Attempt: r.Attempt, Retrying: r.Retrying}, tallied[i])
		}
		heads, err := s.Scans().Heads(ctx, key, prios, from, to, 2)
		require.NoError(t, err)
		require.Len(t, heads, 2)
		for i, r := range rows[:2] {
			r.Payload, r.Keyed, r.Series, r.Retrying = nil, false, "", false
			require.Equal(t, r, heads[i])
		}
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Delete, Row: other}}))
		var ids []uuid.UUID
		require.NoError(t, s.Scans().TaskIDs(ctx, key, 2, func(id uuid.UUID) { ids = append(ids, id) }))
		var want []uuid.UUID
		for _, r := range append([]taskrow.Row{before, after}, rows...) {
			want = append(want, r.TaskID)
		}
		require.ElementsMatch(t, want, ids)
	}},
}
