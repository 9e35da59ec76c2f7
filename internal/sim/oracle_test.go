package sim

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testWorker is a live worker process for hand-made histories.
func testWorker() *proc { return &proc{name: "w", clock: &clock{}, dead: make(chan struct{})} }

// leaseOf is a delivery by p, at attempt (and token) attempt, leased at from from a row
// visible then, with a 10 s timeout, that ended (ok or failed) at ended (zero: runs on).
func leaseOf(p *proc, source string, attempt int, from, ended time.Time, ok bool) *delivery {
	return &delivery{proc: p, source: source, attempt: attempt, token: int64(attempt), at: from, timeout: 10 * time.Second,
		deadline: from.Add(10 * time.Second), ended: ended, ok: ok, made: from.Add(-10 * time.Second)}
}

// The oracle judges deliveries of one task by their leases, whatever rows they came
// from: a marker taken early, or a retry before its backoff, is a violation unless a
// documented fault excuses that pair.
func TestCheckDeliveries(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	a, b := testWorker(), testWorker()
	for _, tc := range []struct {
		name  string
		task  func() *task
		wants string
	}{{
		name: "a marker taken while its lease lasts",
		task: func() *task {
			return &task{id: uuid.New(), deliveries: []*delivery{
				leaseOf(a, "row-1", 1, t0, time.Time{}, false),
				leaseOf(b, "marker-1", 2, t0.Add(3*time.Second), t0.Add(4*time.Second), true),
			}}
		},
		wants: "while the lease taken at",
	}, {
		name: "a retry before its backoff",
		task: func() *task {
			return &task{id: uuid.New(), deliveries: []*delivery{
				leaseOf(a, "row-1", 1, t0, t0.Add(time.Second), false),
				leaseOf(b, "retry-1", 2, t0.Add(1500*time.Millisecond), t0.Add(2*time.Second), true),
			}}
		},
		wants: "before the backoff",
	}, {
		name: "a retry leased early by as much as the failing process's cluster clock trailed",
		task: func() *task {
			failed := leaseOf(a, "row-1", 1, t0, t0.Add(time.Second), false)
			failed.clockErr = -200 * time.Millisecond // its retry is due 200 ms early in true time
			return &task{id: uuid.New(), deliveries: []*delivery{
				failed,
				leaseOf(b, "retry-1", 2, t0.Add(1850*time.Millisecond), t0.Add(2*time.Second), true),
			}}
		},
	}, {
		name: "a copy after a move whose outcome stayed unknown",
		task: func() *task {
			tk := &task{id: uuid.New(), deliveries: []*delivery{
				leaseOf(a, "row-1", 1, t0, time.Time{}, false),
				leaseOf(b, "row-2", 1, t0.Add(3*time.Second), t0.Add(4*time.Second), true),
			}}
			tk.unsettle(t0.Add(-time.Minute))
			return tk
		},
	}, {
		name: "a retry after its backoff, then its marker at its deadline",
		task: func() *task {
			return &task{id: uuid.New(), deliveries: []*delivery{
				leaseOf(a, "row-1", 1, t0, t0.Add(time.Second), false),
				leaseOf(b, "retry-1", 2, t0.Add(2*time.Second), time.Time{}, false),
				leaseOf(a, "marker-2", 3, t0.Add(12*time.Second), t0.Add(13*time.Second), true),
			}}
		},
	}, {
		name: "a retry that Reschedule moved, at its new time",
		task: func() *task {
			tk := &task{id: uuid.New(), deliveries: []*delivery{
				leaseOf(a, "row-1", 1, t0, t0.Add(time.Second), false),
				leaseOf(b, "moved-retry-1", 2, t0.Add(1300*time.Millisecond), t0.Add(2*time.Second), true),
			}}
			tk.moves = [][2]time.Time{{t0.Add(1100 * time.Millisecond), t0.Add(1200 * time.Millisecond)}}
			return tk
		},
	}, {
		name: "a copy from before a replay, leased after the replay's first lease with its old life's token",
		task: func() *task {
			old := leaseOf(a, "copy", 3, t0.Add(11*time.Second), t0.Add(12*time.Second), true)
			old.made = t0.Add(-time.Minute) // made in the old life, before the replay
			tk := &task{id: uuid.New(), replays: []time.Time{t0.Add(-time.Second)}, deliveries: []*delivery{
				leaseOf(b, "replayed", 1, t0, t0.Add(time.Second), true),
				old,
			}}
			tk.deliveries[0].token = 10 // a replay's token is above every delivery of the old life
			return tk
		},
	}} {
		v := checkDeliveries(tc.task(), nil, nil, simBackoff)
		if tc.wants == "" {
			require.Empty(t, v, tc.name)
			continue
		}
		require.Len(t, v, 1, tc.name)
		require.Contains(t, v[0], tc.wants, tc.name)
	}
}

// A failed attempt whose lease ran out before its retry's move is delivered again from
// its marker, at its deadline, whatever the backoff.
func TestCheckDeliveriesMarkerBeforeBackoff(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	w := testWorker()
	e := &delivery{proc: w, source: "row-1", attempt: 1, token: 1, at: t0.Add(10 * time.Second), timeout: 10 * time.Second,
		deadline: t0.Add(10*time.Second + 12*time.Millisecond), ended: t0.Add(10 * time.Second), made: t0.Add(-10 * time.Second)}
	d := &delivery{proc: w, source: "marker-1", attempt: 2, token: 2, at: t0.Add(19 * time.Second), timeout: 10 * time.Second,
		deadline: e.deadline.Add(10 * time.Second), ended: t0.Add(20 * time.Second), ok: true, made: e.deadline.Add(-10 * time.Second)}
	require.Empty(t, checkDeliveries(&task{id: uuid.New(), deliveries: []*delivery{e, d}}, nil, nil, simBackoff))
}

// A copy of a task (an orphan marker a lease fault left) that fails is retried like the
// task: its retry and the task's own may hold leases at once, both copies.
func TestCheckDeliveriesCopyRetried(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	w := testWorker()
	lease := func(source string, attempt int, at, ended time.Duration, ok bool) *delivery {
		return leaseOf(w, source, attempt, t0.Add(at), t0.Add(ended), ok)
	}
	fault := t0.Add(-8 * time.Second) // a swap whose outcome stayed unknown, then a drop that failed
	tk := &task{id: uuid.New(), deliveries: []*delivery{
		lease("row", 1, -5*time.Second, 0, false),
		lease("retry", 2, time.Second, 1500*time.Millisecond, false),
		lease("orphan", 2, 2*time.Second, 2*time.Second, false), // the marker the fault left
		lease("own-retry", 3, 2500*time.Millisecond, 5*time.Second, true),
		lease("copy-retry", 3, 3*time.Second, 4*time.Second, true),
	}}
	require.Empty(t, checkDeliveries(tk, []time.Time{fault}, nil, simBackoff))
	require.NotEmpty(t, checkDeliveries(tk, nil, nil, simBackoff), "with no fault, leases at once")
}

// A task late only because a late task due before it went first is not blamed: the head
// of the line is.
func TestWaitedInLine(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	w := testWorker()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	head := &task{id: uuid.New(), deliveries: []*delivery{{proc: w, due: at(0), at: at(4 * time.Second)}}}
	o := &oracle{tasks: map[uuid.UUID]*task{head.id: head}}
	behind := uuid.New()
	require.True(t, o.waitedInLine(behind, at(time.Second), at(5*time.Second)), "behind a late task")
	require.False(t, o.waitedInLine(behind, at(5*time.Second), at(9*time.Second)), "due after the head started")
	require.False(t, o.waitedInLine(behind, at(time.Second), at(3*time.Second)), "started before the head")
	require.False(t, o.waitedInLine(head.id, at(0), at(4*time.Second)), "not behind itself")
	head.deliveries[0].at = at(lateness)
	require.False(t, o.waitedInLine(behind, at(time.Second), at(5*time.Second)), "behind a head that was on time")
}

// A task whose writing call returned after its process crashed has no lateness bound: its
// deferred touch never went, and the ring finds its row (seed 788). The same task written
// by a live process is late.
func TestCheckLatenessWriterDied(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	w := testWorker()
	w.concurrency = 4
	o := newOracle()
	tk := o.get(uuid.New())
	tk.ok, tk.dueCeil, tk.written = true, t0, t0
	tk.deliveries = []*delivery{leaseOf(w, "row", 1, t0.Add(7*time.Second), t0.Add(8*time.Second), true)}
	tk.deliveries[0].due = t0
	wd := &world{sched: &sched{}, procs: []*proc{w}}
	end := t0.Add(time.Minute)
	require.Len(t, o.checkLateness(wd, end), 1, "late, written by a live process")
	tk.writerDied = true
	require.Empty(t, o.checkLateness(wd, end))
}

// The series rules the oracle excuses, each shown firing on the same history without its
// excuse: an occurrence started beside a copy of the one before (462: the copy acked
// first and moved the series on; 41008710: a failed attempt's marker that a faulty Retry
// move left), an occurrence in flight at a pause whose unstarted leases ran out one after
// another (50006435), and one leased just before a pause by a process whose clock was not
// yet measured (61005317).
func TestCheckSeries(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	occurrence := func(o *oracle, nominal time.Time, ds ...*delivery) {
		tk := o.get(uuid.New())
		tk.series, tk.nominal, tk.deliveries = seriesName, nominal, ds
	}
	check := func(o *oracle, w *proc, leaseFaults []time.Time) []string {
		if o.series == nil {
			o.series = &seriesLog{every: 2 * time.Second, timeout: 10 * time.Second}
		}
		return o.checkSeries(&world{sched: &sched{leaseFaults: leaseFaults}, procs: []*proc{w}}, at(120))
	}
	// pausedAt5 is an oracle of a series paused by a call that returned at 5 s.
	pausedAt5 := func() *oracle {
		o := newOracle()
		o.series = &seriesLog{every: 2 * time.Second, timeout: 10 * time.Second,
			calls: []seriesCall{{op: "pause", from: at(4), to: at(5)}}}
		return o
	}
	w := testWorker()
	for _, tc := range []struct {
		name string
		run  func(excuse bool) []string
	}{{
		name: "the next occurrence beside a copy that acked first",
		run: func(excuse bool) []string {
			o := newOracle()
			ds := []*delivery{leaseOf(w, "row", 1, at(0), time.Time{}, false)}
			var faults []time.Time
			if excuse {
				cp := leaseOf(w, "orphan", 2, at(1), at(2), true)
				faults = []time.Time{cp.made}
				ds = append(ds, cp)
			}
			occurrence(o, at(0), ds...)
			occurrence(o, at(2), leaseOf(w, "next", 1, at(3), at(4), true))
			return check(o, w, faults)
		},
	}, {
		name: "the next occurrence beside the marker a faulty Retry left",
		run: func(excuse bool) []string {
			o := newOracle()
			marker := leaseOf(w, "marker", 2, at(10), time.Time{}, false)
			marker.made = at(0) // the first lease's marker, visible at its deadline
			occurrence(o, at(0), leaseOf(w, "row", 1, at(0), at(3), false), marker)
			occurrence(o, at(2), leaseOf(w, "next", 1, at(11), at(12), true))
			var faults []time.Time
			if excuse {
				faults = []time.Time{at(3)} // the failed attempt's Retry move met a fault
			}
			return check(o, w, faults)
		},
	}, {
		name: "an occurrence whose unstarted leases ran out from before a pause",
		run: func(excuse bool) []string {
			o := pausedAt5()
			attempt := 2 // its row made at 10 s, after the pause
			if excuse {
				attempt = 3 // its first lease's row made at 0 s, before the pause
			}
			occurrence(o, at(0), leaseOf(w, "row", attempt, at(20), at(21), true))
			return check(o, w, nil)
		},
	}, {
		name: "an occurrence leased before a pause by a process not yet measured",
		run: func(excuse bool) []string {
			o := pausedAt5()
			ahead := testWorker()
			if excuse {
				ahead.clock.skew = 1900 * time.Millisecond
			}
			occurrence(o, at(0), leaseOf(ahead, "row", 1, at(6), at(7), true))
			return check(o, ahead, nil)
		},
	}} {
		require.Empty(t, tc.run(true), tc.name)
		require.Len(t, tc.run(false), 1, "%s, without its excuse", tc.name)
	}
}
