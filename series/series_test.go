package series_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/layouts"
	iseries "github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/taskid"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

type env struct {
	t     *testing.T
	ks    string
	s     *gocql.Session
	q     shardqtype.QueueConfig
	clock *testclock.Clock
	c     *series.Client
	p     *producer.Producer
	insp  *inspect.Inspector // looks occurrences up
}

// newEnv gives a test its keyspace and a queue whose lap is short, so a consumer made
// after the clock jumped reaches every partition within a few calls.
func newEnv(t *testing.T, start time.Time) *env {
	t.Helper()
	return newQueueEnv(t, start, shardqtype.QueueConfig{ShardCount: 2, BucketCount: 4, BucketDuration: time.Second, DefaultTimeout: time.Second})
}

// newQueueEnv is newEnv with a queue of settings cfg, named here.
func newQueueEnv(t *testing.T, start time.Time, cfg shardqtype.QueueConfig) *env {
	t.Helper()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	cfg.Name = "q" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	q, err := shardq.CreateQueue(context.Background(), cassandratest.Driver(s), cfg)
	require.NoError(t, err)
	clock := testclock.New(start)
	c, err := series.New(cassandratest.Driver(s), series.Config{Clock: clock})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	insp, err := inspect.New(cassandratest.Driver(s), inspect.Config{Clock: clock})
	require.NoError(t, err)
	return &env{t: t, ks: ks, s: s, q: q, clock: clock, c: c, p: p, insp: insp}
}

// next moves the clock to the series' outstanding occurrence, takes it with a fresh
// consumer and acks it, and returns it.
func (e *env) next(name string) *consumer.Task {
	e.t.Helper()
	ctx := context.Background()
	in, err := e.c.Get(ctx, e.q.Name, name)
	require.NoError(e.t, err)
	require.NotEqual(e.t, uuid.Nil, in.NextID, "no occurrence outstanding")
	if e.clock.Now().Before(in.NextAt) {
		e.clock.Add(in.NextAt.Sub(e.clock.Now()))
	}
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock})
	require.NoError(e.t, err)
	for range 8 * e.q.BucketCount {
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(e.t, err)
		if len(got) > 0 {
			require.Len(e.t, got, 1, "two occurrences of a series were due at once")
			require.Equal(e.t, in.NextID, got[0].ID)
			require.Equal(e.t, name, got[0].Series)
			require.NoError(e.t, c.AckTasks(ctx, got...))
			return got[0]
		}
		e.clock.Add(e.q.BucketDuration / 4)
	}
	e.t.Fatalf("occurrence %s of %s, due %v, was never delivered", in.NextID, name, in.NextAt)
	return nil
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Now())
	ctx := context.Background()
	s := series.Series{Queue: e.q.Name, Name: "report", Every: time.Hour, Payload: []byte("r")}
	first, err := e.c.Create(ctx, s)
	require.NoError(t, err)
	require.Equal(t, int64(1), first.Occurrences)
	require.Equal(t, e.clock.Now().Truncate(time.Millisecond).Add(time.Hour).UTC(), first.NextAt.UTC())

	again, err := e.c.Create(ctx, s)
	require.NoError(t, err)
	require.Equal(t, first.NextID, again.NextID, "an equal create schedules nothing new")

	s.Every = 2 * time.Hour
	_, err = e.c.Create(ctx, s)
	var conflict *series.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.ErrorIs(t, err, series.ErrExists)
	require.Equal(t, time.Hour, conflict.Existing.Every)

	task, err := e.insp.Task(ctx, first.NextID)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, task.State)

	list, err := e.c.List(ctx, e.q.Name)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "report", list[0].Name)
}

func TestInvalidSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Now())
	for field, s := range map[string]series.Series{
		"Series.Every":    {Every: time.Minute, Cron: "* * * * *"},
		"Series.Cron":     {Cron: "61 * * * *"},
		"Series.TimeZone": {Cron: "0 * * * *", TimeZone: "Mars/Olympus"},
		"Series.Name":     {Name: "-", Every: 0},
		"Series.Priority": {Every: time.Minute, Priority: 1000},
		"Series.End":      {Every: time.Minute, Start: time.Now(), End: time.Now().Add(-time.Hour)},
	} {
		s.Queue = e.q.Name
		if s.Name == "" {
			s.Name = "s"
		} else {
			s.Name = ""
		}
		_, err := e.c.Create(context.Background(), s)
		var verr *shardqtype.ValidationError
		require.ErrorAs(t, err, &verr, field)
		require.Equal(t, field, verr.Field)
	}
	_, err := e.c.Create(context.Background(), series.Series{Queue: "nosuchqueue", Name: "s", Every: time.Minute})
	require.ErrorIs(t, err, shardqtype.ErrQueueNotFound)
	_, err = e.c.Get(context.Background(), e.q.Name, "none")
	require.ErrorIs(t, err, series.ErrNotFound)
}

// Occurrences follow one another on acks, each at its time in the series, and the
// series ends after Count.
func TestOccurrencesFollowAcks(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "tick", Every: 10 * time.Second, Start: start, Count: 3})
	require.NoError(t, err)
	for i := range 3 {
		got := e.next("tick")
		require.Equal(t, start.Add(time.Duration(i)*10*time.Second), got.DueAt.UTC())
	}
	in, err := e.c.Get(ctx, e.q.Name, "tick")
	require.NoError(t, err)
	require.True(t, in.Ended)
	require.Equal(t, uuid.Nil, in.NextID)
	require.Equal(t, int64(3), in.Occurrences)
}

// Missed occurrences are skipped by default; CatchUp runs one for them, then goes on
// as scheduled.
func TestMissedOccurrences(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	for _, policy := range []series.Missed{series.Skip, series.CatchUp} {
		e := newEnv(t, start.Add(-time.Second))
		ctx := context.Background()
		_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "m", Every: time.Minute, Start: start, Missed: policy})
		require.NoError(t, err)
		require.Equal(t, start, e.next("m").DueAt.UTC())
		// The consumers were down for ten and a half minutes after the first ran.
		e.clock.Add(10*time.Minute + 30*time.Second)
		in, err := e.c.Get(ctx, e.q.Name, "m")
		require.NoError(t, err)
		require.Equal(t, start.Add(time.Minute), in.NextAt.UTC(), "the next was scheduled when the first was acked")
		got := e.next("m")
		require.Equal(t, start.Add(time.Minute), got.DueAt.UTC())
		in, err = e.c.Get(ctx, e.q.Name, "m")
		require.NoError(t, err)
		if policy == series.Skip {
			require.Equal(t, start.Add(11*time.Minute), in.NextAt.UTC(), "skipped to the next future time")
			continue
		}
		require.Equal(t, start.Add(2*time.Minute), in.NextAt.UTC(), "one catch-up for the missed ones")
		require.False(t, in.NextAt.After(e.clock.Now()), "the catch-up is due at once")
		e.next("m")
		in, err = e.c.Get(ctx, e.q.Name, "m")
		require.NoError(t, err)
		require.Equal(t, start.Add(11*time.Minute), in.NextAt.UTC(), "then on schedule again")
	}
}

// A cron series in Europe/Paris runs at 02:30 local time every day: on the night the
// clocks go forward (02:30 does not exist) it runs at 03:00, the moment the clock jumps
// past it; on the night they go back (02:30 happens twice) it runs once.
func TestCronAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		start time.Time
		want  []time.Time
	}{
		{"spring", time.Date(2026, 3, 27, 12, 0, 0, 0, paris), []time.Time{
			time.Date(2026, 3, 28, 2, 30, 0, 0, paris), // CET, UTC+1
			time.Date(2026, 3, 29, 3, 0, 0, 0, paris),  // the gap: 02:00 became 03:00 CEST
			time.Date(2026, 3, 30, 2, 30, 0, 0, paris), // CEST, UTC+2
		}},
		{"autumn", time.Date(2026, 10, 23, 12, 0, 0, 0, paris), []time.Time{
			time.Date(2026, 10, 24, 2, 30, 0, 0, paris),              // CEST
			time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC).In(paris), // the first 02:30, CEST
			time.Date(2026, 10, 26, 2, 30, 0, 0, paris),              // CET
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, c.start)
			_, err := e.c.Create(context.Background(), series.Series{Queue: e.q.Name, Name: "nightly",
				Cron: "30 2 * * *", TimeZone: "Europe/Paris"})
			require.NoError(t, err)
			for _, want := range c.want {
				got := e.next("nightly")
				require.True(t, want.Equal(got.DueAt), "want %v, got %v", want, got.DueAt.In(paris))
			}
		})
	}
}

// Pause withdraws the pending occurrence, Resume schedules the next future one, Update
// replaces the pending one, and Delete removes the series and its pending occurrence.
func TestPauseResumeUpdateDelete(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "p", Every: time.Minute, Start: start})
	require.NoError(t, err)
	e.next("p")
	in, err := e.c.Get(ctx, e.q.Name, "p")
	require.NoError(t, err)
	pending := in.NextID

	require.NoError(t, e.c.Pause(ctx, e.q.Name, "p"))
	require.NoError(t, e.c.Pause(ctx, e.q.Name, "p"), "pausing twice is harmless")
	in, err = e.c.Get(ctx, e.q.Name, "p")
	require.NoError(t, err)
	require.True(t, in.Paused)
	require.Equal(t, uuid.Nil, in.NextID)
	_, err = e.insp.Task(ctx, pending)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound, "the pending occurrence was cancelled")

	e.clock.Add(5 * time.Minute)
	require.NoError(t, e.c.Resume(ctx, e.q.Name, "p"))
	in, err = e.c.Get(ctx, e.q.Name, "p")
	require.NoError(t, err)
	require.False(t, in.Paused)
	require.Equal(t, start.Add(5*time.Minute), in.NextAt.UTC(), "resumed at the first time from now")

	updated, err := e.c.Update(ctx, series.Series{Queue: e.q.Name, Name: "p", Every: time.Hour, Start: start, Priority: 3})
	require.NoError(t, err)
	require.Equal(t, start.Add(time.Hour), updated.NextAt.UTC())
	require.NotEqual(t, in.NextID, updated.NextID)
	_, err = e.insp.Task(ctx, in.NextID)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound, "the replaced occurrence was cancelled")
	require.Equal(t, updated.Occurrences, in.Occurrences, "the replacement keeps its number")
	got := e.next("p")
	require.Equal(t, 3, got.Priority)

	in, err = e.c.Get(ctx, e.q.Name, "p")
	require.NoError(t, err)
	require.NoError(t, e.c.Delete(ctx, e.q.Name, "p"))
	_, err = e.c.Get(ctx, e.q.Name, "p")
	require.ErrorIs(t, err, series.ErrNotFound)
	_, err = e.insp.Task(ctx, in.NextID)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
	list, err := e.c.List(ctx, e.q.Name)
	require.NoError(t, err)
	require.Empty(t, list)
	require.ErrorIs(t, e.c.Delete(ctx, e.q.Name, "p"), series.ErrNotFound)
}

// An occurrence that ends without moving its series (here, cancelled by hand; the same
// as a consumer dying between its ack and the move) is found by the keeper, which
// schedules the next one.
func TestKeeperMovesStalledSeries(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	in, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "k", Every: time.Minute, Start: start})
	require.NoError(t, err)
	require.NoError(t, e.p.Cancel(ctx, in.NextID, producer.CancelOptions{}))
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	again, err := e.c.Get(ctx, e.q.Name, "k")
	require.NoError(t, err)
	require.Equal(t, in.NextID, again.NextID, "not stalled before its time")

	e.clock.Add(time.Minute)
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	again, err = e.c.Get(ctx, e.q.Name, "k")
	require.NoError(t, err)
	require.NotEqual(t, in.NextID, again.NextID)
	require.Equal(t, start.Add(time.Minute), again.NextAt.UTC())
	require.Equal(t, start.Add(time.Minute), e.next("k").DueAt.UTC())
}

// An occurrence that its scheduler moved the series to but died before writing is
// written by the keeper, once: it is the row the series names, so a second keeper, or
// the scheduler coming back, adds nothing.
func TestKeeperWritesLostOccurrence(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "w", Every: time.Minute, Start: start})
	require.NoError(t, err)
	e.next("w")
	in, err := e.c.Get(ctx, e.q.Name, "w")
	require.NoError(t, err)
	// As if the scheduler had died between the series' move and the write: the series
	// names an occurrence that is nowhere.
	require.NoError(t, e.p.Cancel(ctx, in.NextID, producer.CancelOptions{}))
	lost := taskid.New(in.NextAt, e.q.Name)
	require.NoError(t, e.s.Query(`UPDATE series SET task_id = ?, written = null WHERE queue = ? AND name = ?`,
		gocql.UUID(lost), e.q.Name, "w").Exec())

	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	_, err = e.insp.Task(ctx, lost)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound, "written only once its scheduler had time to write it")
	e.clock.Add(iseries.RepairAfter)
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	task, err := e.insp.Task(ctx, lost)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, task.State)
	got := e.next("w")
	require.Equal(t, lost, got.ID)
	require.Equal(t, start.Add(time.Minute), got.DueAt.UTC())
}

// An occurrence left unwritten for over half a lap would, written at its place, lie in a
// bucket consumers have passed: the keeper writes it at a new place instead, with its time
// kept, and deletes the old one.
func TestKeeperReplacesOccurrenceLostForALap(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "l", Every: time.Minute, Start: start})
	require.NoError(t, err)
	e.next("l")
	in, err := e.c.Get(ctx, e.q.Name, "l")
	require.NoError(t, err)
	require.NoError(t, e.p.Cancel(ctx, in.NextID, producer.CancelOptions{}))
	lost := taskid.New(in.NextAt, e.q.Name)
	require.NoError(t, e.s.Query(`UPDATE series SET task_id = ?, written = null WHERE queue = ? AND name = ?`,
		gocql.UUID(lost), e.q.Name, "l").Exec())

	e.clock.Add(in.NextAt.Sub(e.clock.Now()) + e.q.Layout().Lap())
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	again, err := e.c.Get(ctx, e.q.Name, "l")
	require.NoError(t, err)
	require.NotEqual(t, lost, again.NextID, "written at a place a lap old")
	_, err = e.insp.Task(ctx, lost)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
	got := e.next("l")
	require.Equal(t, again.NextID, got.ID)
	require.Equal(t, start.Add(time.Minute), got.DueAt.UTC(), "the occurrence keeps its time")
}

// An occurrence that ran to its end while its series recorded neither that it was
// written nor that it ended (the scheduler's record of the write and the consumer's
// move both failed) is not written again at a new place once half a lap has passed: the
// keeper finds it ended and moves the series on (simulator seed 40006380).
func TestKeeperLeavesEndedOccurrenceUnrecorded(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, start.Add(-time.Second))
	ctx := context.Background()
	_, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "e", Every: time.Minute, Start: start})
	require.NoError(t, err)
	e.next("e")
	in, err := e.c.Get(ctx, e.q.Name, "e")
	require.NoError(t, err)
	var saved string
	require.NoError(t, e.s.Query(`SELECT JSON * FROM series WHERE queue = ? AND name = ?`, e.q.Name, "e").Scan(&saved))
	ran := e.next("e")
	require.Equal(t, in.NextID, ran.ID)
	// The series as it was before the occurrence ran, and without the record of its write:
	// the move on its ack never happened, so neither did the next occurrence.
	moved, err := e.c.Get(ctx, e.q.Name, "e")
	require.NoError(t, err)
	// A cancel that timed out on a loaded node (a clean CI run) may have applied: sent
	// again, it finds the task gone.
	err = e.p.Cancel(ctx, moved.NextID, producer.CancelOptions{})
	for tries := 1; tries < 5 && gocqlv1.TimedOut(err); tries++ {
		if err = e.p.Cancel(ctx, moved.NextID, producer.CancelOptions{}); errors.Is(err, shardqtype.ErrTaskNotFound) {
			err = nil
		}
	}
	require.NoError(t, err)
	require.NoError(t, e.s.Query(`INSERT INTO series JSON ?`, saved).Exec())
	require.NoError(t, e.s.Query(`UPDATE series SET written = null WHERE queue = ? AND name = ?`, e.q.Name, "e").Exec())

	e.clock.Add(iseries.StalledAfter + e.q.Layout().Lap())
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	again, err := e.c.Get(ctx, e.q.Name, "e")
	require.NoError(t, err)
	require.NotEqual(t, in.NextID, again.NextID, "the series was not moved on")
	require.Equal(t, start.Add(2*time.Minute), again.NextAt.UTC())
	require.Equal(t, start.Add(2*time.Minute), e.next("e").DueAt.UTC(), "the occurrence that ran ran again")
}

// A queue's layout changed from 120 x 10 s to 60 x 1 s, a one-minute lap. A series
// created under the new layout whose creator died right after the series' LWT, before
// writing its occurrence, is kept 150 s after the occurrence's time, over two laps of the
// new layout but under half a lap of the first, while a consumer polls every second: the
// occurrence is written where the consumer reads it, runs with its time kept, and the
// series goes on.
func TestKeeperRepairsOccurrenceAfterLayoutShortensLap(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, time.Now(), shardqtype.QueueConfig{ShardCount: 2, BucketCount: 120, BucketDuration: 10 * time.Second,
		DefaultTimeout: time.Second})
	ctx := context.Background()
	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(e.s), e.q.Name, shardqtype.LayoutConfig{BucketCount: 60, BucketDuration: time.Second})
	require.NoError(t, err)
	e.clock.Add(ch.From.Sub(e.clock.Now()) + time.Minute)
	start := e.clock.Now().UTC().Truncate(time.Second).Add(10 * time.Second)
	c, err := consumer.New(cassandratest.Driver(e.s), consumer.Config{Queue: e.q.Name, Clock: e.clock})
	require.NoError(t, err)
	// poll calls the consumer once a second for d, and returns the first task it took.
	poll := func(d time.Duration) *consumer.Task {
		t.Helper()
		for end := e.clock.Now().Add(d); e.clock.Now().Before(end); e.clock.Add(time.Second) {
			got, err := c.AcquireTasks(ctx, 10)
			require.NoError(t, err)
			if len(got) > 0 {
				require.Len(t, got, 1, "two occurrences of a series were due at once")
				require.NoError(t, c.AckTasks(ctx, got...))
				return got[0]
			}
		}
		return nil
	}

	in, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "c", Every: time.Minute, Start: start})
	require.NoError(t, err)
	// As if Create had died between the series' LWT and the occurrence's write: the series
	// names an occurrence that is nowhere.
	require.NoError(t, e.p.Cancel(ctx, in.NextID, producer.CancelOptions{}))
	lost := taskid.New(in.NextAt, e.q.Name)
	require.NoError(t, e.s.Query(`UPDATE series SET task_id = ?, written = null WHERE queue = ? AND name = ?`,
		gocql.UUID(lost), e.q.Name, "c").Exec())
	require.Nil(t, poll(in.NextAt.Sub(e.clock.Now())+150*time.Second))

	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	// Two laps of the new layout: a row the consumer reads comes at once, one written late
	// within the lap at the next sweep.
	got := poll(2 * time.Minute)
	require.NotNil(t, got, "the repaired occurrence never ran")
	require.Equal(t, start, got.DueAt.UTC(), "the repaired occurrence keeps its time")
	next, err := e.c.Get(ctx, e.q.Name, "c")
	require.NoError(t, err)
	require.Equal(t, int64(2), next.Occurrences, "the series went on")
	got = poll(2 * time.Minute)
	require.NotNil(t, got, "the next occurrence never ran")
	require.Equal(t, next.NextID, got.ID)
	require.Equal(t, next.NextAt.UTC(), got.DueAt.UTC())
}

// After a queue's layout changed from a 4 s lap to a 30-minute one, the index entry of an
// occurrence that ran outlives half the new lap: a keeper that finds the occurrence
// unrecorded before then must find that it ran, not write it again at a new place.
func TestRanOccurrenceRecordedForHalfTheLongestLap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Now())
	ctx := context.Background()
	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(e.s), e.q.Name, shardqtype.LayoutConfig{BucketCount: 30, BucketDuration: time.Minute})
	require.NoError(t, err)
	e.clock.Add(ch.From.Sub(e.clock.Now()) + time.Minute)
	_, err = e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "r", Every: time.Minute})
	require.NoError(t, err)
	ran := e.next("r")
	var ttl int
	require.NoError(t, e.s.Query(`SELECT TTL(state) FROM task_index WHERE task_id = ? ALLOW FILTERING`, gocql.UUID(ran.ID)).Scan(&ttl))
	require.Greater(t, time.Duration(ttl)*time.Second, 15*time.Minute, "the entry of the occurrence that ran outlives half the new lap")
}

// An occurrence due just before a layout change took effect, whose creator died right
// after the series' LWT, is kept once the old layout is sealed (written into no more,
// and so marked drained, read no more, once a read finds it empty): the keeper writes it
// into the layout in force, not at its place in the old one, where it would be lost if
// the old one were marked drained meanwhile.
func TestKeeperWritesOccurrenceOfSealedLayoutIntoTheLayoutInForce(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, time.Now(), shardqtype.QueueConfig{ShardCount: 2, BucketCount: 120, BucketDuration: 10 * time.Second,
		DefaultTimeout: time.Second})
	ctx := context.Background()
	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(e.s), e.q.Name, shardqtype.LayoutConfig{BucketCount: 60, BucketDuration: time.Second})
	require.NoError(t, err)
	e.clock.Add(ch.From.Sub(e.clock.Now()) - 20*time.Second)
	start := ch.From.Add(-5 * time.Second).UTC()
	in, err := e.c.Create(ctx, series.Series{Queue: e.q.Name, Name: "s", Every: time.Minute, Start: start})
	require.NoError(t, err)
	require.NoError(t, e.p.Cancel(ctx, in.NextID, producer.CancelOptions{}))
	lost := taskid.New(in.NextAt, e.q.Name)
	require.NoError(t, e.s.Query(`UPDATE series SET task_id = ?, written = null WHERE queue = ? AND name = ?`,
		gocql.UUID(lost), e.q.Name, "s").Exec())

	e.clock.Add(ch.From.Sub(e.clock.Now()) + layouts.SealAfter + 10*time.Second)
	require.NoError(t, e.c.Keep(ctx, e.q.Name))
	kept, err := e.c.Get(ctx, e.q.Name, "s")
	require.NoError(t, err)
	task, err := e.insp.Task(ctx, kept.NextID)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, task.State)
	require.True(t, strings.HasPrefix(task.PartitionKey, e.q.Name+"~1:"), "written into the layout in force: %s", task.PartitionKey)
	require.True(t, start.Equal(e.next("s").DueAt), "the occurrence keeps its time")
}
