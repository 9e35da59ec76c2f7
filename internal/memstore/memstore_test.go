package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/shard"
)

// The parts of memstore no real node can be made to show quickly: the tombstone
// threshold, gc grace, ballots at a frozen clock, and the faults the Gate injects.

var start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// cluster returns a cluster on a server clock of its own, and a client of it whose clock
// is the server's.
func cluster(t *testing.T, threshold int) (*memstore.Cluster, *testclock.Clock, store.Store) {
	t.Helper()
	clock := testclock.New(start)
	c, err := memstore.New(memstore.Config{Now: clock.Now, TombstoneFailureThreshold: threshold})
	require.NoError(t, err)
	return c, clock, c.Client(memstore.ClientConfig{Clock: clock.Now})
}

func TestNewNeedsAClock(t *testing.T) {
	t.Parallel()
	_, err := memstore.New(memstore.Config{})
	require.ErrorIs(t, err, memstore.ErrNoClock)
}

// deleted writes n task rows visible from at on, stamped before the client's clock, and
// deletes them, leaving n tombstones.
func deleted(t *testing.T, ctx context.Context, s store.Store, at time.Time, n int) {
	t.Helper()
	var rows []taskrow.Row
	for i := range n {
		rows = append(rows, taskRow(1, at.Add(time.Duration(i)*time.Millisecond), "p"))
	}
	ts := start.Add(-time.Second).UnixMicro()
	require.NoError(t, s.Leasing().WriteMarkers(ctx, rows, ts, 1))
	require.NoError(t, s.Leasing().DropMarkers(ctx, rows, ts, 1))
}

// A range read that walks more tombstones than the threshold before its limit fails
// with the driver's read failure; one that reaches its limit first does not.
func TestTombstoneThresholdFailsARead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clock, s := cluster(t, 10)
	now := clock.Now()
	head := taskRow(1, now.Add(-time.Second), "head")
	require.NoError(t, s.Tasks().Write(ctx, insert(head)))
	deleted(t, ctx, s, now, 10)
	from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))
	rows, _, err := s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 100, 1<<20)
	require.NoError(t, err, "10 tombstones, not more than the threshold")
	require.Equal(t, []taskrow.Row{head}, rows)

	deleted(t, ctx, s, now.Add(time.Second), 1)
	_, _, err = s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 100, 1<<20)
	var rf *driver.Error
	require.ErrorAs(t, err, &rf)
	require.Equal(t, driver.CodeReadFailure, rf.Code)
	require.False(t, lwt.Definite(err))
	_, err = s.Leasing().IDs(ctx, key, []int8{1}, from, to, 10)
	require.ErrorAs(t, err, &rf)

	rows, _, err = s.Leasing().Rows(ctx, key, []int8{1}, from, to, 1, 100, 1<<20)
	require.NoError(t, err, "the limit is reached before the tombstones")
	require.Equal(t, []taskrow.Row{head}, rows)
	rows, _, err = s.Leasing().Rows(ctx, key, []int8{1}, head.ID, to, 10, 100, 1<<20)
	require.Error(t, err)
	require.Empty(t, rows)
	rows, _, err = s.Leasing().Rows(ctx, key, []int8{1}, shard.MaxID(now.Add(time.Second)), to, 10, 100, 1<<20)
	require.NoError(t, err, "a lower bound past the tombstones skips them")
	require.Empty(t, rows)
}

// Tombstones go once gc_grace_seconds (600 for tasks) have passed on the servers'
// clock; a write stamped below a tombstone stays hidden until then, and shows after.
func TestGCGracePurgesTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clock, s := cluster(t, 5)
	now := clock.Now()
	deleted(t, ctx, s, now, 6)
	from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))
	_, _, err := s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 100, 1<<20)
	require.Error(t, err)

	late := taskRow(1, now, "late")
	write := func() {
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: late, Stamp: now.UnixMicro()}}))
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Delete, Row: late}}))
		require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: late, Stamp: now.UnixMicro()}}))
	}
	write()
	_, ok, err := s.Tasks().Read(ctx, key, 1, late.ID)
	require.NoError(t, err)
	require.False(t, ok, "the tombstone shadows the older write")

	clock.Add(600 * time.Second)
	_, _, err = s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 100, 1<<20)
	require.Error(t, err, "not older than gc grace yet")
	clock.Add(time.Second)
	rows, _, err := s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 100, 1<<20)
	require.NoError(t, err)
	require.Empty(t, rows)
	require.NoError(t, s.Tasks().Write(ctx, []store.Mutation{{Op: store.Insert, Row: late, Stamp: now.UnixMicro()}}))
	got, ok, err := s.Tasks().Read(ctx, key, 1, late.ID)
	require.NoError(t, err)
	require.True(t, ok, "once its tombstone is purged, a late write stamped below it comes back")
	require.Equal(t, late, got)
}

// Cells that expired read as absent and count as tombstones until gc grace has passed
// from their expiry.
func TestExpiredCellsAreTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clock, s := cluster(t, 3)
	for i := range 2 {
		at := clock.Now().Add(time.Duration(i) * time.Second)
		require.NoError(t, s.DeadLetters().Write(ctx, deadletters.Letter{ID: shard.NewID(at), TaskID: shard.NewID(at), Queue: "q",
			Payload: []byte("p")}))
	}
	page, err := s.DeadLetters().Page(ctx, "q", clock.Now(), uuid.Nil, 10)
	require.NoError(t, err)
	require.Len(t, page, 2)
	clock.Add(deadletters.Retention)
	_, err = s.DeadLetters().Page(ctx, "q", start, uuid.Nil, 10)
	require.Error(t, err, "two expired rows of many cells each")
	clock.Add(864000 * time.Second) // dead_letters keeps the default gc grace
	_, err = s.DeadLetters().Page(ctx, "q", start, uuid.Nil, 10)
	require.Error(t, err, "not older than gc grace yet")
	clock.Add(time.Second)
	page, err = s.DeadLetters().Page(ctx, "q", start, uuid.Nil, 10)
	require.NoError(t, err)
	require.Empty(t, page)
}

// Ballots grow on a partition even while the servers' clock stands still, so a later
// conditional write wins over an earlier one whatever their values.
func TestBallotsGrowAtAFrozenClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, s := cluster(t, 0)
	r := store.SeriesRow{Queue: "q", Name: "s", Spec: "b", Version: 1, TaskID: shard.NewID(start)}
	applied, err := s.Series().Put(ctx, r, 0)
	require.NoError(t, err)
	require.True(t, applied)
	r.Spec, r.Version = "a", 2 // a smaller value, which would win no tie
	applied, err = s.Series().Put(ctx, r, 1)
	require.NoError(t, err)
	require.True(t, applied)
	got, err := s.Series().Get(ctx, "q", "s", true)
	require.NoError(t, err)
	require.Equal(t, "a", got.Spec)
	require.EqualValues(t, 2, got.Version)
}

// A plain write stamped by a client's clock: one ahead of the servers' writes rows that a
// later conditional delete, stamped by its ballot, cannot remove; one behind loses to it.
func TestClientClockStampsPlainWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock, _ := cluster(t, 0)
	for _, tc := range []struct {
		skew     time.Duration
		survives bool
	}{{time.Hour, true}, {-time.Hour, false}} {
		s := c.Client(memstore.ClientConfig{Clock: func() time.Time { return clock.Now().Add(tc.skew) }})
		name := tc.skew.String()
		at := clock.Now().UTC().Truncate(time.Millisecond)
		r := store.SeriesRow{Queue: "q", Name: name, Spec: "{}", Version: 1, TaskID: shard.NewID(at)}
		applied, err := s.Series().Put(ctx, r, 0)
		require.NoError(t, err)
		require.True(t, applied)
		require.NoError(t, s.Series().MarkWritten(ctx, "q", name, r.TaskID, clock.Now().Add(tc.skew).UnixMicro()))
		clock.Add(time.Second)
		applied, err = s.Series().Delete(ctx, "q", name, 1)
		require.NoError(t, err)
		require.True(t, applied)
		applied, err = s.Series().Put(ctx, r, 0)
		require.NoError(t, err)
		require.True(t, applied)
		got, err := s.Series().Get(ctx, "q", name, true)
		require.NoError(t, err)
		require.Equal(t, tc.survives, got.Written == r.TaskID, "skew %v", tc.skew)
	}
}

// faulty is a client whose Gate gives every request matching op the fault f, and
// records the requests.
func faulty(c *memstore.Cluster, clock *testclock.Clock, op string, f memstore.Fault, seen *[]memstore.Request) store.Store {
	return c.Client(memstore.ClientConfig{Clock: clock.Now, Gate: func(_ context.Context, r memstore.Request) (memstore.Fault, error) {
		if seen != nil {
			*seen = append(*seen, r)
		}
		if r.Op == op {
			return f, nil
		}
		return memstore.None, nil
	}})
}

// Each fault returns the driver's error for it, and applies the write or not as it says.
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type check func(t *testing.T, err error)
	definite := func(code int) check {
		return func(t *testing.T, err error) {
			var re *driver.Error
			require.ErrorAs(t, err, &re)
			require.Equal(t, code, re.Code)
			require.True(t, lwt.Definite(err))
		}
	}
	timedOut := func(code int) check {
		return func(t *testing.T, err error) {
			var e *driver.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, code, e.Code)
			require.True(t, driver.TimedOut(err))
			require.False(t, driver.Unanswered(err))
			require.False(t, lwt.Definite(err))
		}
	}
	writeTimeout, readTimeout := timedOut(driver.CodeWriteTimeout), timedOut(driver.CodeReadTimeout)
	noResponse := func(t *testing.T, err error) {
		require.True(t, driver.TimedOut(err))
		require.True(t, driver.Unanswered(err))
		require.False(t, lwt.Definite(err))
	}
	unavailable := definite(driver.CodeUnavailable)
	for _, tc := range []struct {
		fault   memstore.Fault
		applied bool
		cas     check // a conditional write's error
		plain   check // a plain write's, of one partition
		batch   check // a plain batch's, of two
		read    check
	}{
		{memstore.Unavailable, false, unavailable, unavailable, unavailable, unavailable},
		{memstore.Overloaded, false, definite(driver.CodeOverloaded), definite(driver.CodeOverloaded),
			definite(driver.CodeOverloaded), definite(driver.CodeOverloaded)},
		{memstore.TimeoutLost, false, writeTimeout, writeTimeout, writeTimeout, readTimeout},
		{memstore.TimeoutApplied, true, writeTimeout, writeTimeout, writeTimeout, readTimeout},
		{memstore.NoResponseLost, false, noResponse, noResponse, noResponse, noResponse},
		{memstore.NoResponseApplied, true, noResponse, noResponse, noResponse, noResponse},
	} {
		c, clock, clean := cluster(t, 0)
		at := clock.Now().UTC().Truncate(time.Millisecond)

		claim := store.Claim{Holder: shard.NewID(at), ClaimedAt: at}
		s := faulty(c, clock, "Keys.Claim", tc.fault, nil)
		applied, _, err := s.Keys().Claim(ctx, "q", "k", claim, time.Minute, store.Claim{})
		tc.cas(t, err)
		require.False(t, applied)
		_, err = clean.Keys().Get(ctx, "q", "k", true)
		require.Equal(t, tc.applied, err == nil, "fault %d", tc.fault)

		s = faulty(c, clock, "Series.AddName", tc.fault, nil)
		tc.plain(t, s.Series().AddName(ctx, "q", "s", clock.Now().UnixMicro()))
		names, err := clean.Series().Names(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, tc.applied, len(names) == 1)

		s = faulty(c, clock, "Tasks.Write", tc.fault, nil)
		a, b := taskRow(1, at, "a"), taskRow(1, at, "b")
		b.Key = "q:1:0"
		tc.batch(t, s.Tasks().Write(ctx, insert(a, b)))
		_, ok, err := clean.Tasks().Read(ctx, b.Key, 1, b.ID)
		require.NoError(t, err)
		require.Equal(t, tc.applied, ok)

		s = faulty(c, clock, "Keys.Get", tc.fault, nil)
		_, err = s.Keys().Get(ctx, "q", "k", false)
		tc.read(t, err)
	}
}

// A Gate's error (the process crashed) is returned as it is, with nothing applied; a
// context already ended sends nothing.
func TestGateErrorAppliesNothing(t *testing.T) {
	t.Parallel()
	c, clock, clean := cluster(t, 0)
	crashed := errors.New("crashed")
	s := c.Client(memstore.ClientConfig{Clock: clock.Now, Gate: func(context.Context, memstore.Request) (memstore.Fault, error) {
		return memstore.None, crashed
	}})
	ctx := context.Background()
	_, _, err := s.Locks().Take(ctx, key, holder(), 1, nil, time.Minute)
	require.ErrorIs(t, err, crashed)
	row, err := clean.Locks().Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.LockRow{}, row)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = clean.Locks().Take(ended, key, holder(), 1, nil, time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	row, err = clean.Locks().Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.LockRow{}, row)
}

// The Gate sees each request as the Cassandra implementation sends it: every page of a
// paged read (a full page asks for the next), every batch, every statement.
func TestGateSeesEachRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock, clean := cluster(t, 0)
	now := clock.Now()
	var rows []taskrow.Row
	for i := range 4 {
		rows = append(rows, taskRow(1, now.Add(time.Duration(i)*time.Second), "p"))
	}
	require.NoError(t, clean.Tasks().Write(ctx, insert(rows...)))
	var seen []memstore.Request
	s := faulty(c, clock, "", memstore.None, &seen)
	from, to := shard.MinID(now.Add(-time.Minute)), shard.MaxID(now.Add(time.Minute))
	got, _, err := s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 2, 1<<20)
	require.NoError(t, err)
	require.Equal(t, rows, got)
	page := memstore.Request{Table: "tasks", Op: "Leasing.Rows/page", Key: key}
	require.Equal(t, []memstore.Request{page, page, page}, seen, "two full pages, then an empty one")

	seen = nil
	_, _, err = s.Leasing().Rows(ctx, key, []int8{1}, from, to, 3, 2, 1<<20)
	require.NoError(t, err)
	require.Len(t, seen, 2, "the limit ends the read")
	seen = nil
	_, _, err = s.Leasing().Rows(ctx, key, []int8{1}, from, to, 10, 2, 1)
	require.NoError(t, err)
	require.Len(t, seen, 1, "cut in the first page")

	seen = nil
	lk := store.LockRef{Key: key, Holder: holder(), Token: 1}
	_, _, err = s.Locks().Take(ctx, key, lk.Holder, 1, nil, time.Minute)
	require.NoError(t, err)
	_, err = s.Locks().Receipt(ctx, lk)
	require.NoError(t, err)
	require.NoError(t, s.Leasing().WriteMarkers(ctx, append(rows, taskRow(1, now, "x")), now.UnixMicro(), 2))
	require.Equal(t, []memstore.Request{
		{Table: "tasks", Op: "Locks.Take", Key: key, Write: true, Conditional: true},
		{Table: "tasks", Op: "Locks.Receipt", Key: key, Serial: true},
		{Table: "tasks", Op: "Leasing.WriteMarkers", Key: key, Write: true},
	}, seen)
}

// What the statements imply and memstore keeps: a lock taken for less than a second is
// bound with TTL 0, which is none. (How dead letters are stamped is a conformance
// scenario.)
func TestTTLsAsTheStatementsGiveThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clock, s := cluster(t, 0)
	h := holder()
	applied, _, err := s.Locks().Take(ctx, key, h, 1, nil, 500*time.Millisecond)
	require.NoError(t, err)
	require.True(t, applied)
	clock.Add(time.Hour)
	row, err := s.Locks().Read(ctx, key)
	require.NoError(t, err)
	require.Equal(t, h, row.Holder, "TTL 0 never expires")
}

// A straggler (NoResponseLate) answers as NoResponseApplied does, lands only when Later
// runs it, with the stamps it was sent with: a delete sent after it, stamped later, wins
// over it though it lands first; coordinator stamps are those of when it was sent.
func TestStragglers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, clock, clean := cluster(t, 0)
	var landing []func()
	late := func(op string) store.Store {
		return c.Client(memstore.ClientConfig{Clock: clock.Now, Later: func(apply func()) { landing = append(landing, apply) },
			Gate: func(_ context.Context, r memstore.Request) (memstore.Fault, error) {
				if r.Op == op {
					return memstore.NoResponseLate, nil
				}
				return memstore.None, nil
			}})
	}
	at := clock.Now()
	kept, shadowed := taskRow(1, at, "kept"), taskRow(1, at, "shadowed")
	err := late("Tasks.Write").Tasks().Write(ctx, []store.Mutation{
		{Op: store.Insert, Row: kept, Stamp: at.UnixMicro()}, {Op: store.Insert, Row: shadowed, Stamp: at.UnixMicro()}})
	require.True(t, driver.Unanswered(err))
	require.Len(t, landing, 1)
	for _, r := range []taskrow.Row{kept, shadowed} {
		there, err := clean.Tasks().Exists(ctx, r)
		require.NoError(t, err)
		require.False(t, there, "landed before Later ran it: %s", string(r.Payload))
	}
	clock.Add(time.Second)
	require.NoError(t, clean.Tasks().Write(ctx, []store.Mutation{{Op: store.Delete, Row: shadowed, Stamp: clock.Now().UnixMicro()}}))
	landing[0]()
	for _, r := range []taskrow.Row{kept, shadowed} {
		there, err := clean.Tasks().Exists(ctx, r)
		require.NoError(t, err)
		require.Equal(t, string(r.Payload) == "kept", there, string(r.Payload))
	}

	// A touch the coordinator stamped when it was sent, landing after one sent later.
	l := shard.Layout{ShardCount: 1, BucketCount: 10, BucketDuration: time.Second}
	var first, second signal.Touches
	first.Add(l, shard.NewID(at), uuid.New())
	second.Add(l, shard.NewID(at.Add(100*time.Millisecond)), uuid.New())
	require.True(t, driver.Unanswered(late("Signals.Touch").Signals().Touch(ctx, first.List())))
	clock.Add(time.Second)
	require.NoError(t, clean.Signals().Touch(ctx, second.List()))
	landing[1]()
	cells, err := clean.Signals().Cells(ctx, l.Ring(), l.Bucket(at), l.Bucket(at))
	require.NoError(t, err)
	require.Len(t, cells, 1)
	for _, id := range cells {
		require.Equal(t, at.Add(100*time.Millisecond).UnixMilli(), shard.IDTime(id).UnixMilli(), "the touch sent later, stamped later, wins")
	}

	// A conditional write's accepted round: committed by the next SERIAL read of its
	// partition, or when Later runs it, not seen before by a plain read.
	claims := late("Keys.Claim").Keys()
	for i, k := range []string{"by-read", "by-coordinator"} {
		applied, _, err := claims.Claim(ctx, "q", k, store.Claim{Holder: shard.NewID(at), ClaimedAt: at}, time.Minute, store.Claim{})
		require.True(t, driver.Unanswered(err))
		require.False(t, applied)
		require.Len(t, landing, 3+i)
		_, err = clean.Keys().Get(ctx, "q", k, false)
		require.ErrorIs(t, err, store.ErrNotFound, "committed before its time: %s", k)
	}
	_, err = clean.Keys().Get(ctx, "q", "by-read", true)
	require.NoError(t, err, "the SERIAL read commits the round it finds")
	landing[3]()
	_, err = clean.Keys().Get(ctx, "q", "by-coordinator", false)
	require.NoError(t, err, "its coordinator commits it")
	landing[2]() // committed already: nothing more
	_, err = clean.Keys().Get(ctx, "q", "by-read", false)
	require.NoError(t, err)
}
