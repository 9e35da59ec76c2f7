package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// tolerance is how early a delivery may start against the time a task is due, beyond the
// error the delivering process's cluster clock may have (clockBound).
const tolerance = 50 * time.Millisecond

// clockBound is how far ahead of true time p's cluster clock may read: half the round
// trip of its last measure's readings, and its host clock's drift over a measure's
// life. A clock further ahead (a step of the host's clock taken for elapsed time, say)
// delivers early, and the oracle says so.
func clockBound(p *proc) time.Duration {
	drift := time.Duration(math.Abs(p.clock.drift) * float64(2*clustertime.Refresh))
	return p.state.Cluster.Uncertainty() + drift
}

// oracle records what the processes asked and what they saw, in true time, and checks
// the queue's promises at the end of a run.
type oracle struct {
	mu         sync.Mutex
	tasks      map[uuid.UUID]*task
	order      []uuid.UUID // tasks by first schedule, for picking
	keys       map[string][]keyClaim
	refusals   []refusal
	violations []string
	series     *seriesLog // nil unless the run keeps a series
}

// seriesLog is what the run's series owner asked, and of what.
type seriesLog struct {
	every, timeout time.Duration
	calls          []seriesCall
}

// seriesCall is a call on the series: create, pause or resume; last marks the resume
// that keeps it going to the end.
type seriesCall struct {
	op, by   string
	last     bool
	from, to time.Time
	err      error
}

// refusal is a schedule refused for a key whose holder had ended before the call began
// (at ended, as then recorded).
type refusal struct {
	key       string
	at, ended time.Time
	holder    *task
}

type task struct {
	id  uuid.UUID
	key string
	// series names the series it is an occurrence of, and nominal its time in it.
	series  string
	nominal time.Time
	// ok: a call that schedules it (a schedule or replay) returned success; the task must
	// run until it succeeds or dies, unless cancelled.
	ok bool
	// due is the latest due time a call that returned success gave it; dueFloor the
	// earliest any call, even one that failed, may have given it since.
	due      time.Time
	dueFloor time.Time
	// dueCeil is the latest due time any call gave it, and written when the last call that
	// wrote it (a schedule or a reschedule, even one that failed) returned: from the later
	// of the two, it is due and its row is in the store.
	dueCeil time.Time
	written time.Time
	// writerDied: the last call that wrote it returned after its process had crashed, which a
	// real caller never sees; a touch it left undone leaves the row for the ring to find
	// (signal.Toucher), so its lateness is not bounded.
	writerDied bool
	// writes are the spans of the calls that wrote it, each until its deferred touch
	// (signal.Coalesce) was sent and admitted.
	writes [][2]time.Time
	// moves are the spans of the reschedules of it, from their start to their return.
	moves [][2]time.Time
	// cancelled is when a cancel of it returned success (zero: never), and afterLease
	// whether that cancel let a delivery in flight finish; maybeCancelled that one
	// returned an error that leaves it unknown.
	cancelled      time.Time
	afterLease     bool
	maybeCancelled bool
	// ended is when it was last seen to end (a success acked, or dead); mayEnd the earliest
	// it may have (a handler returned success, or failed its last attempt, or a cancel
	// that failed began): from then on it may hold no key.
	ended     time.Time
	mayEnd    time.Time
	succeeded bool
	dead      bool
	// unsettled: a call that moves or cancels it returned an unknown outcome, which
	// may leave two copies of it; unknownFrom lists when each such call began, as a copy
	// it made may be leased from then on.
	unsettled   bool
	unknownFrom []time.Time
	// claimed is when the last call that claimed its key returned: the claim it wrote
	// bears a time before that, from which KeyClaimGrace runs.
	claimed time.Time
	// calls lists the calls that scheduled, moved, cancelled or replayed it, for reports.
	calls []string
	// replays are when replays of its dead letter began, but for refused ones: two that
	// both write run it twice, as ReplayDeadLetter says.
	replays    []time.Time
	deliveries []*delivery
}

type delivery struct {
	task    uuid.UUID
	proc    *proc
	at      time.Time // true time the handler started
	attempt int
	token   int64
	timeout time.Duration
	// raw is the task as handed over, internals included, for reports; source names the
	// row it was leased from (that row's place in line and its token).
	raw, source string
	// made is when the row it was leased from was made, if a lease made it (its place in
	// line less the task's timeout).
	made time.Time
	// deadline is the lease's end as the consumer set it, and due the task's due time.
	deadline, due time.Time
	// ended is when the handler returned; ok whether it succeeded.
	ended time.Time
	ok    bool
	// clockErr is how far the process's cluster clock was ahead of true time when the
	// handler started (and, handlers being short, when it returned).
	clockErr time.Duration
	acked    bool // an Acked event named it
}

// keyClaim is one success of a call that scheduled a task with a key.
type keyClaim struct {
	id       uuid.UUID
	from, to time.Time // the call's span
}

func newOracle() *oracle {
	return &oracle{tasks: map[uuid.UUID]*task{}, keys: map[string][]keyClaim{}}
}

func (o *oracle) violate(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.violations = append(o.violations, fmt.Sprintf(format, args...))
}

func (o *oracle) get(id uuid.UUID) *task {
	t, ok := o.tasks[id]
	if !ok {
		t = &task{id: id}
		o.tasks[id] = t
		o.order = append(o.order, id)
	}
	return t
}

func (o *oracle) scheduled(p *proc, began time.Time, tasks []producer.Task, ids []uuid.UUID, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	var partial *producer.PartialError
	for i, id := range ids {
		if i >= len(tasks) || id == uuid.Nil {
			continue
		}
		t := o.get(id)
		t.key = tasks[i].Key
		t.calls = append(t.calls, fmt.Sprintf("schedule by %s %s-%s due %s key %q: %v", p.name, stamp(began), stamp(now), stamp(tasks[i].DueAt), tasks[i].Key, err))
		written := err == nil
		if errors.As(err, &partial) {
			written = !slices.Contains(partial.Failed, i)
		}
		if t.key != "" && t.claimed.IsZero() {
			t.claimed = time.Now()
		}
		if written {
			t.ok = true
			t.due = tasks[i].DueAt
			if t.key != "" {
				o.keys[t.key] = append(o.keys[t.key], keyClaim{id: id, from: began, to: now})
			}
		}
		if t.dueFloor.IsZero() || tasks[i].DueAt.Before(t.dueFloor) {
			t.dueFloor = tasks[i].DueAt
		}
		t.dueCeil, t.written = maxTime(t.dueCeil, tasks[i].DueAt), now
		t.writes = append(t.writes, [2]time.Time{began, now.Add(time.Second)})
		t.writerDied = p.crashed()
	}
	var dup *producer.DuplicateError
	if errors.As(err, &dup) {
		// A holder whose end was not recorded in the index (its ack's record failed) is not
		// found, and its claim is honoured for KeyClaimGrace (docs/design.md, Task lifecycle mechanics).
		if t := o.tasks[dup.ExistingID]; t != nil && len(t.replays) == 0 && (t.endedBefore(began) || t.cancelledBefore(began)) &&
			began.After(t.claimed.Add(producer.KeyClaimGrace+tolerance)) {
			o.refusals = append(o.refusals, refusal{key: dup.Key, at: began, ended: t.ended, holder: t})
		}
	}
}

func (o *oracle) pick(rng *rand.Rand) (uuid.UUID, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.order) == 0 {
		return uuid.Nil, false
	}
	// Occurrences of a series are the series' to move: the oracle checks them against its
	// promises, not a producer's.
	id := o.order[rng.IntN(len(o.order))]
	return id, o.tasks[id].series == ""
}

func (o *oracle) cancelled(p *proc, id uuid.UUID, afterLease bool, began time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var inFlight *shardqtype.TaskInFlightError
	if err != nil && !definite(err) {
		o.get(id).unsettle(began)
	}
	switch {
	case err == nil:
		t := o.get(id)
		t.cancelled, t.afterLease = time.Now(), afterLease
		t.calls = append(t.calls, fmt.Sprintf("cancel by %s %s-%s after lease %v", p.name, stamp(began), stamp(time.Now()), afterLease))
	case errors.Is(err, shardqtype.ErrTaskNotFound), errors.As(err, &inFlight):
	default:
		// It may have been removed from when the call began, and its key freed.
		t := o.get(id)
		t.maybeCancelled = true
		if t.mayEnd.IsZero() || began.Before(t.mayEnd) {
			t.mayEnd = began
		}
		t.calls = append(t.calls, fmt.Sprintf("cancel by %s %s-%s after lease %v: %v", p.name, stamp(began), stamp(time.Now()), afterLease, err))
	}
}

// rescheduling notes a reschedule about to be sent: its row may be leased before the call
// returns.
func (o *oracle) rescheduling(id uuid.UUID, due time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(id)
	if due.Before(t.dueFloor) {
		t.dueFloor = due
	}
	t.dueCeil = maxTime(t.dueCeil, due)
}

func (o *oracle) rescheduled(p *proc, id uuid.UUID, due, began time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(id)
	t.calls = append(t.calls, fmt.Sprintf("reschedule by %s %s-%s to %s: %v", p.name, stamp(began), stamp(time.Now()), stamp(due), err))
	if err != nil && !definite(err) {
		t.unsettle(began)
	}
	// A reschedule renews the key's claim before it finds the task in flight or gone.
	if t.key != "" {
		t.claimed = time.Now()
	}
	if due.Before(t.dueFloor) {
		t.dueFloor = due
	}
	if err == nil {
		t.due = due
	}
	t.written = time.Now()
	t.writes = append(t.writes, [2]time.Time{began, t.written.Add(time.Second)})
	t.moves = append(t.moves, [2]time.Time{began, t.written})
	t.writerDied = p.crashed()
}

func (o *oracle) replayed(p *proc, id uuid.UUID, began time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(id)
	t.calls = append(t.calls, fmt.Sprintf("replay by %s %s-%s: %v", p.name, stamp(began), stamp(time.Now()), err))
	if t.key != "" {
		t.claimed = time.Now() // a replay claims the key again
	}
	if !errors.Is(err, producer.ErrDeadLetterNotFound) {
		t.replays = append(t.replays, began)
	}
	// Due now: a replay moves the due time back.
	t.dueFloor = time.Time{}
	if err == nil {
		// Replayed: scheduled anew, whatever stopped it before; but a cancel that returned
		// after the replay began may have removed the replayed task.
		t.ok, t.dead, t.succeeded = true, false, false
		if t.cancelled.Before(began) {
			t.cancelled = time.Time{}
		}
		t.due, t.ended, t.mayEnd = time.Time{}, time.Time{}, time.Time{}
	}
}

func (o *oracle) delivered(p *proc, ct *consumer.Task) *delivery {
	now := time.Now()
	// The cluster clock's error at this instant: the process can do no better.
	clockErr := p.state.Cluster.Now().Sub(now)
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.get(ct.ID)
	d := &delivery{task: ct.ID, proc: p, at: now, attempt: ct.Attempt, token: ct.Token, timeout: ct.Timeout,
		deadline: ct.Deadline, due: ct.DueAt, raw: fmt.Sprintf("%+v", *ct), source: sourceOf(ct), made: visibleOf(ct).Add(-ct.Timeout)}
	// Due: the earliest time any call gave it (a failed move may still have applied). The
	// consumer judged it due by its clock when it leased it: that clock's error then is
	// at least how far its time of the lease is past the handler's start.
	clockErr = max(clockErr, ct.Deadline.Add(-ct.Timeout).Sub(now))
	d.clockErr = clockErr
	// Early by the clock's error is excused only as far as the clock may err.
	excused := min(max(clockErr, 0), clockBound(p))
	if floor := t.dueFloor; !floor.IsZero() && now.Add(excused+tolerance).Before(floor) {
		o.violations = append(o.violations, fmt.Sprintf("task %s delivered at %s, %s before it was due (%s; cluster clock error %s)",
			ct.ID, stamp(now), floor.Sub(now), stamp(floor), clockErr)+t.history()+fmt.Sprintf("\n      this delivery: attempt %d due %s visible %s deadline %s", ct.Attempt, stamp(ct.DueAt), stamp(visibleOf(ct)), stamp(ct.Deadline)))
	}
	if ct.Series != "" {
		t.series, t.nominal = ct.Series, ct.DueAt
		// "Every runs the series at a fixed interval" (series.Series.Every), and DueAt "is
		// then the occurrence's time in the series" (consumer.Task.Series): no occurrence
		// runs before its time.
		if now.Add(excused + tolerance).Before(ct.DueAt) {
			o.violations = append(o.violations, fmt.Sprintf("occurrence %s of series %s delivered at %s, %s before its time %s (cluster clock error %s)",
				ct.ID, ct.Series, stamp(now), ct.DueAt.Sub(now), stamp(ct.DueAt), clockErr))
		}
	}
	t.deliveries = append(t.deliveries, d)
	if d.attempt > maxAttempts {
		// A copy of a task that died: its dead-lettering left the marker (README,
		// Guarantees: a duplicate, never a loss).
		t.unsettle(d.leased())
	}
	return d
}

func (o *oracle) finished(d *delivery, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d.ended, d.ok = time.Now(), err == nil && !d.proc.crashed()
	if t := o.tasks[d.task]; (d.ok || d.attempt >= maxAttempts) && t.mayEnd.IsZero() {
		t.mayEnd = d.ended
	}
}

func (o *oracle) observed(p *proc, e shardqtype.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e := e.(type) {
	case shardqtype.Acked:
		for _, id := range e.TaskIDs {
			t := o.get(id)
			for _, d := range slices.Backward(t.deliveries) {
				if d.proc == p && d.ok {
					d.acked = true
					t.succeeded = true
					t.ended = time.Now()
					break
				}
			}
		}
	case shardqtype.Retried:
		t := o.get(e.TaskID)
		t.calls = append(t.calls, fmt.Sprintf("retried by %s at %s attempt %d delay %s", p.name, stamp(time.Now()), e.Attempt, e.Delay))
	case shardqtype.LeaseLost:
		t := o.get(e.TaskID)
		t.calls = append(t.calls, fmt.Sprintf("lease lost by %s at %s", p.name, stamp(time.Now())))
	case shardqtype.DeadLettered:
		t := o.get(e.TaskID)
		t.dead = true
		t.ended = time.Now()
	}
}

func (o *oracle) seriesKept(every, timeout time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.series = &seriesLog{every: every, timeout: timeout}
}

func (o *oracle) seriesCalled(p *proc, op string, last bool, began time.Time, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.series.calls = append(o.series.calls, seriesCall{op: op, by: p.name, last: last, from: began, to: time.Now(), err: err})
}

// allDelivered reports whether every task of ids has been delivered.
func (o *oracle) allDelivered(ids []uuid.UUID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if t := o.tasks[id]; id != uuid.Nil && (t == nil || len(t.deliveries) == 0) {
			return false
		}
	}
	return true
}

// deliveriesOf returns every delivery so far of the tasks of ids.
func (o *oracle) deliveriesOf(ids []uuid.UUID) []*delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*delivery
	for _, id := range ids {
		if t := o.tasks[id]; t != nil {
			out = append(out, t.deliveries...)
		}
	}
	return out
}

// allEnded reports whether every task of ids has run to success or died.
func (o *oracle) allEnded(ids []uuid.UUID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if t := o.tasks[id]; id != uuid.Nil && (t == nil || !t.ran() && !t.dead) {
			return false
		}
	}
	return true
}

func (o *oracle) totals() (scheduled, deliveries int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.tasks {
		if t.ok {
			scheduled++
		}
		deliveries += len(t.deliveries)
	}
	return scheduled, deliveries
}

// check returns every broken promise of the run.
// left is what the run proper left in the store.
func (o *oracle) check(w *world, end time.Time, left map[uuid.UUID]bool) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := slices.Clone(o.violations)
	ids := slices.Clone(o.order)
	for id := range left {
		if _, ok := o.tasks[id]; !ok {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		t := o.tasks[id]
		if t == nil {
			t = &task{id: id}
		}
		switch {
		case left[id] && !t.succeeded && t.cancelled.IsZero():
			v = append(v, fmt.Sprintf("task %s is still in the store at the end, never run to success (%d deliveries)%s", id, len(t.deliveries), t.history()))
		case t.ok && t.cancelled.IsZero() && !t.maybeCancelled && !t.ran() && !t.dead:
			v = append(v, fmt.Sprintf("task %s lost: scheduled with success, never ran to success nor died (%d deliveries, due %s)%s", id, len(t.deliveries), stamp(t.due), t.history()))
		}
		if dv := checkDeliveries(t, w.sched.leaseFaults, w.workerCrashes(), simBackoff); len(dv) > 0 {
			v = append(v, strings.Join(dv, "\n  ")+t.history())
		}
	}
	v = append(v, o.checkKeys()...)
	v = append(v, o.checkLateness(w, end)...)
	v = append(v, o.checkSeries(w, end)...)
	for _, r := range o.refusals {
		// A copy of the holder (a marker a lease fault left, leased again) in flight when the
		// call began holds the key again: "while a task with this key is pending, in flight
		// or retrying, another fails" (README, Task lifecycle).
		if slices.ContainsFunc(r.holder.deliveries, func(d *delivery) bool {
			return !d.leased().After(r.at.Add(tolerance)) && !d.deadline.Before(r.at.Add(-tolerance))
		}) {
			continue
		}
		v = append(v, fmt.Sprintf("key %q refused at %s for %s, which ended at %s%s", r.key, stamp(r.at), r.holder.id, stamp(r.ended), r.holder.history()))
	}
	return v
}

// history tells what a task went through, for a violation's report.
func (t *task) history() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n      ok %v due %s cancelled %s (after lease %v) ended %s", t.ok, stamp(t.due), stamp(t.cancelled), t.afterLease, stamp(t.ended))
	for _, c := range t.calls {
		fmt.Fprintf(&b, "\n      %s", c)
	}
	for _, d := range t.deliveries {
		fmt.Fprintf(&b, "\n      delivered %s by %s attempt %d token %d due %s deadline %s, ended %s ok %v acked %v",
			stamp(d.at), d.proc.name, d.attempt, d.token, stamp(d.due), stamp(d.deadline), stamp(d.ended), d.ok, d.acked)
		if os.Getenv("SIM_STACKS") != "" {
			fmt.Fprintf(&b, "\n        %s", d.raw)
		}
	}
	return b.String()
}

// checkDeliveries checks that no delivery of a task starts after a cancel of it returned;
// that a later attempt carries a higher token; that no attempt starts before the task was
// due, nor a retry before its backoff from the failure it follows; and that no two
// deliveries of it hold leases at once, whatever rows they were leased from, while the
// earlier's holder lives and runs it. Only the copies the README documents as a
// duplicate, never a loss, excuse a pair (copyPair).
func checkDeliveries(t *task, leaseFaults, workerCrashes []time.Time, backoff time.Duration) []string {
	var v []string
	ds := slices.Clone(t.deliveries)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].leased().Before(ds[j].leased()) })
	for _, d := range ds {
		if !t.cancelled.IsZero() && d.leased().After(t.cancelled.Add(tolerance)) {
			v = append(v, fmt.Sprintf("task %s leased at %s, after its cancel returned at %s", t.id, stamp(d.leased()), stamp(t.cancelled)))
		}
	}
	if len(t.replays) > 1 {
		return v
	}
	for i, d := range ds {
		at := d.leased().Add(tolerance)
		for _, e := range ds[:i] {
			if t.copyPair(e, d, leaseFaults, workerCrashes) {
				continue
			}
			// A delivery from a row made before a replay that came before e's lease is of
			// an earlier life of the task (a copy its death could not see): its tokens are
			// that life's.
			if e.attempt < d.attempt && e.token >= d.token && !t.replayedBetween(e.leased(), d.leased()) &&
				(d.made.IsZero() || !t.replayedBetween(d.made, e.leased())) {
				v = append(v, fmt.Sprintf("task %s attempt %d has token %d, not above attempt %d's %d", t.id, d.attempt, d.token, e.attempt, e.token))
			}
			if e.deadline.After(at) && !crashedBy(e.proc, at) && (e.ended.IsZero() || e.ok || e.ended.After(at)) &&
				!faultNear(leaseFaults, d.made) {
				v = append(v, fmt.Sprintf("task %s: leased at %s from row %s while the lease taken at %s by %s from row %s lasted",
					t.id, stamp(d.leased()), d.source, stamp(e.leased()), e.proc.name, e.source))
			}
			// The retry a failure writes is due Backoff after it, by the failing
			// process's cluster clock; the consumer leases it by its own, so the two
			// clocks' errors then may bring the lease forward. A delivery from
			// e's marker (visible at e's deadline: the lease ran out before the retry's move)
			// is no retry, nor one a reschedule moved (a retrying task runs at the time
			// Reschedule gives it).
			if d.attempt == e.attempt+1 && !e.ok && !e.ended.IsZero() && !crashedBy(e.proc, e.ended) &&
				d.made.Add(d.timeout).Sub(e.deadline).Abs() > tolerance && !t.movedBetween(e.ended, d.leased()) &&
				!t.replayedBetween(e.ended, d.leased()) &&
				d.leased().Add(tolerance+max(d.clockErr, 0)+max(-e.clockErr, 0)).Before(e.ended.Add(backoff)) {
				v = append(v, fmt.Sprintf("task %s attempt %d leased at %s, before the backoff from attempt %d's failure at %s",
					t.id, d.attempt, stamp(d.leased()), e.attempt, stamp(e.ended)))
			}
		}
	}
	return v
}

// copyPair reports whether e and d (leased after e) may be deliveries of two copies of
// the task that the README documents: one a copy left by a lease request's fault or a
// worker's crash (isCopy), or leased after a call that moves or cancels it began and
// returned an unknown outcome ("A crash in the middle of a move can leave the task
// twice"), or past its last attempt (its dead-lettering left the marker).
func (t *task) copyPair(e, d *delivery, leaseFaults, workerCrashes []time.Time) bool {
	if e.attempt > maxAttempts || d.attempt > maxAttempts ||
		t.isCopy(d, leaseFaults, workerCrashes) || t.isCopy(e, leaseFaults, workerCrashes) {
		return true
	}
	return slices.ContainsFunc(t.unknownFrom, func(from time.Time) bool { return from.Before(d.leased().Add(tolerance)) })
}

// movedBetween reports whether a reschedule of it ran at some time between a and b.
func (t *task) movedBetween(a, b time.Time) bool {
	return slices.ContainsFunc(t.moves, func(m [2]time.Time) bool { return m[0].Before(b) && m[1].After(a) })
}

// unsettle records that a call which began at from left it unknown whether the task was
// moved or cancelled.
func (t *task) unsettle(from time.Time) {
	t.unsettled = true
	t.unknownFrom = append(t.unknownFrom, from)
}

// faultNear reports whether a lease request met a fault within a second of at: two rows
// of one task made then (one a marker left by a swap whose outcome stayed unknown, or by a
// drop that failed) look like one row leased twice.
func faultNear(faults []time.Time, at time.Time) bool {
	for _, f := range faults {
		if f.Sub(at).Abs() <= time.Second {
			return true
		}
	}
	return false
}

// workerCrashes are when the run's worker processes crashed.
func (w *world) workerCrashes() []time.Time {
	var at []time.Time
	for _, p := range w.procs {
		if p.concurrency > 0 && p.crashed() {
			at = append(at, p.crashedAt())
		}
	}
	return at
}

func crashedBy(p *proc, at time.Time) bool {
	return p.crashed() && !p.crashedAt().After(at)
}

// lateness bounds how late the first delivery of a task may start after it is due (or
// after the call that wrote it returned, if later), when nothing the README allows to delay
// it happened near: "Idle workers read the queue's small wake-up signal every
// SignalInterval (250 ms), so a task scheduled in any process starts within about that
// long" (docs/recipe.md, Workers), and a fetch follows one that found tasks no sooner than
// BatchDelay (200 ms) later. The rest of the bound is the work between reading a touched
// signal and starting the handler, which the README does not bound: the touch's Coalesce
// (20 ms), and the signal read, the take (lock, read, markers, the batch that deletes the
// rows and frees the lock) and the index writes, a dozen requests at the simulated
// network's latency, of which one in 30 takes up to 500 ms: allowing two seconds for them
// (a chain of four slow requests) keeps the bound far below what a stranded task waits
// (an idle worker's poll, up to MaxIdleInterval, 10 s; a sweep, SweepInterval, 10 s; a
// lap, 20 s at least here), and above the tail of a run without faults. The clocks' error adds nothing: consumers judge
// due-ness by the cluster's clock, whose error is milliseconds (tolerance), and every
// process's skew is within MaxClockSkew (MaxSkew), so touches are never read as too old.
const lateness = worker.DefaultSignalInterval + worker.DefaultBatchDelay + signal.Coalesce + 2*time.Second

// checkLateness checks that a task due while the workers were live and had a free handler
// starts within lateness of being due. Exempt are tasks that saw a fault from an idle
// poll's interval (MaxIdleInterval) before they were due to when they must start (a
// failed look-ahead leaves a worker asleep until its next poll; a lock taken or released
// with an unknown outcome lasts its LockTTL; a failed take leaves rows for the next), or
// a crash from a lock's TTL before (a dead holder's lock lasts its LockTTL; a dead
// worker's tasks wait for another),
// or any worker running as many handlers as its Concurrency (the task may be leased by it
// and wait in its queue, as worker.Config.Prefetch says), or no worker alive throughout,
// or a late task ahead of it in line (waitedInLine);
// and tasks whose due time a call may have changed without telling (an unknown outcome,
// a cancel, a replay), or whose writer died before its call returned.
func (o *oracle) checkLateness(w *world, end time.Time) []string {
	var workers []*proc
	var crashes []time.Time
	for _, p := range w.procs {
		if p.crashed() {
			crashes = append(crashes, p.crashedAt())
		}
		if p.concurrency > 0 {
			workers = append(workers, p)
		}
	}
	near := func(times []time.Time, from, to time.Time) bool {
		return slices.ContainsFunc(times, func(at time.Time) bool { return !at.Before(from) && !at.After(to) })
	}
	var v []string
	for _, id := range o.order {
		t := o.tasks[id]
		if !t.ok || t.unsettled || t.writerDied || len(t.replays) > 0 || !t.cancelled.IsZero() || t.maybeCancelled {
			continue
		}
		due := maxTime(t.dueCeil, t.written)
		by := due.Add(lateness)
		if by.After(end) || near(w.sched.faultsAt, due.Add(-worker.DefaultMaxIdleInterval), by) || near(crashes, due.Add(-w.queue.LockTTL), by) ||
			slices.ContainsFunc(t.writes, func(c [2]time.Time) bool { return near(w.sched.faultsAt, c[0], c[1]) }) {
			continue
		}
		first := slices.MinFunc(append(slices.Clone(t.deliveries), &delivery{at: end}), func(a, b *delivery) int { return a.at.Compare(b.at) })
		// A first delivery of a later attempt follows a lease whose handler never started:
		// its holder crashed, or it ran out waiting for a handler (docs/recipe.md, Workers).
		if !first.at.After(by.Add(tolerance)) || first.attempt > 1 || !o.workersReady(workers, due, by) || o.waitedInLine(id, due, first.at) {
			continue
		}
		v = append(v, fmt.Sprintf("task %s due %s first delivered at %s, %s late (bound %s)%s", id, stamp(due), stamp(first.at),
			first.at.Sub(due), lateness, t.history()))
	}
	return v
}

// waitedInLine reports whether task id, due at due and first started at first, waited
// behind a late one: a delivery of another task due before it that had not started when
// it came due, started before it, and was itself more than lateness late. Workers take
// what is due oldest first (per partition, and keep their prefetched tasks in that order),
// so a backlog (left by a crash, a pause, workers starting) delays everything due behind
// it; the head of the line is the one checked, and excused only by what delayed it.
func (o *oracle) waitedInLine(id uuid.UUID, due, first time.Time) bool {
	for other, t := range o.tasks {
		if other == id {
			continue
		}
		for _, d := range t.deliveries {
			if d.due.Before(due) && d.at.After(due) && !d.at.After(first) && d.at.Sub(d.due) > lateness {
				return true
			}
		}
	}
	return false
}

// workersReady reports whether a worker was alive from from to to, and none of those alive
// then ran as many handlers as its Concurrency at any moment in between.
func (o *oracle) workersReady(workers []*proc, from, to time.Time) bool {
	live := false
	for _, p := range workers {
		gone := p.crashed() && p.crashedAt().Before(to)
		if p.started.After(to) || p.crashed() && p.crashedAt().Before(from) {
			continue
		}
		live = live || !p.started.After(from) && !gone
		// Handlers running at from, then each start and end in the window in time order.
		type step struct {
			at time.Time
			n  int
		}
		running := 0
		var steps []step
		for _, t := range o.tasks {
			for _, d := range t.deliveries {
				if d.proc != p || d.at.After(to) || !d.ended.IsZero() && d.ended.Before(from) {
					continue
				}
				if d.at.After(from) {
					steps = append(steps, step{d.at, 1})
				} else {
					running++
				}
				if !d.ended.IsZero() && !d.ended.After(to) {
					steps = append(steps, step{d.ended, -1})
				}
			}
		}
		slices.SortFunc(steps, func(a, b step) int { return cmp.Or(a.at.Compare(b.at), b.n-a.n) })
		for _, s := range steps {
			if running >= p.concurrency {
				return false
			}
			running += s.n
		}
		if running >= p.concurrency {
			return false
		}
	}
	return live
}

// checkSeries checks the promises of docs/recipe.md's "Recurring series" for the run's series,
// if it kept one. Duplicates of one occurrence (one task) are checkDeliveries'.
func (o *oracle) checkSeries(w *world, end time.Time) []string {
	sl := o.series
	if sl == nil {
		return nil
	}
	var v []string
	var occs []*task
	for _, id := range o.order {
		// A replay of a dead occurrence runs it again, outside the series' order.
		if t := o.tasks[id]; t.series != "" && len(t.deliveries) > 0 && len(t.replays) == 0 {
			occs = append(occs, t)
		}
	}
	calls := func() string {
		var b strings.Builder
		for _, c := range sl.calls {
			fmt.Fprintf(&b, "\n      %s by %s %s-%s: %v", c.op, c.by, stamp(c.from), stamp(c.to), c.err)
		}
		return b.String()
	}
	leaseFaults := w.sched.leaseFaults
	// "The occurrence a move makes is named, with its place and write timestamp, in the
	// series' row before it is written, so writing it again after a crash writes the same
	// row and never a second occurrence": no two occurrences run for one time.
	byTime := map[time.Time]*task{}
	for _, t := range occs {
		if u := byTime[t.nominal]; u != nil {
			v = append(v, fmt.Sprintf("series %s ran two occurrences, %s and %s, for its time %s%s%s", seriesName, u.id, t.id, stamp(t.nominal), u.history(), t.history()))
		}
		byTime[t.nominal] = t
	}
	// "A series has one occurrence outstanding (pending, in flight or retrying)": with
	// OnAck, no occurrence starts while a delivery of another holds a live lease and runs
	// (a holder past its lease, or crashed, may still run). A copy of an occurrence is
	// documented as a duplicate that may run beside the next ("One occurrence at a
	// time"), on either side.
	workerCrashes := w.workerCrashes()
	copyOf := func(t *task, d *delivery) bool { return t.isCopy(d, leaseFaults, workerCrashes) }
	// A copy that ran beside another delivery of its occurrence and succeeded first moves
	// the series on while that delivery still runs: the two runs are copies of each other.
	besideItsCopy := func(t *task, d *delivery) bool {
		return slices.ContainsFunc(t.deliveries, func(c *delivery) bool {
			return c != d && c.ok && copyOf(t, c) && c.at.After(d.at) && !c.ended.IsZero() &&
				(d.ended.IsZero() || c.ended.Before(d.ended))
		})
	}
	for _, a := range occs {
		for _, b := range occs {
			if a == b {
				continue
			}
			for _, da := range a.deliveries {
				for _, db := range b.deliveries {
					at := db.at
					if copyOf(b, db) {
						continue // a copy of b that may run after b's ack: a documented duplicate
					}
					if da.at.Before(at) && (da.ended.IsZero() || da.ended.After(at.Add(tolerance))) && da.deadline.After(at.Add(tolerance)) &&
						!crashedBy(da.proc, at) && !copyOf(a, da) && !besideItsCopy(a, da) {
						v = append(v, fmt.Sprintf("series %s: occurrence %s started at %s while occurrence %s ran (since %s, lease until %s)%s%s",
							seriesName, b.id, stamp(at), a.id, stamp(da.at), stamp(da.deadline), a.history(), b.history()))
					}
				}
			}
		}
	}
	// "Pause cancels the pending occurrence (one in flight finishes)": from a pause that
	// returned success to the next resume, no occurrence is leased but one leased before
	// the pause returned (in flight or retrying then), or a copy a lease fault left.
	for i, c := range sl.calls {
		if c.op != "pause" || c.err != nil {
			continue
		}
		until := end
		for _, r := range sl.calls[i+1:] {
			if r.op == "resume" || r.op == "create" {
				until = r.from
				break
			}
		}
		for _, t := range occs {
			// Leased before: a delivery started, or a later attempt's row was made (a lease
			// that expired, its handler never started) before the pause returned; or the
			// first delivery started is of a later attempt whose earlier leases, none of
			// them started, each ran out (a timeout apart at least), the first of them
			// before the pause returned: in flight then, it is left to finish.
			before := slices.ContainsFunc(t.deliveries, func(d *delivery) bool {
				return !d.leasedFrom().After(c.to.Add(tolerance)) || d.attempt > 1 && !d.made.After(c.to.Add(tolerance))
			})
			if first := slices.MinFunc(append(slices.Clone(t.deliveries), &delivery{attempt: math.MaxInt}), func(a, b *delivery) int {
				return cmp.Compare(a.attempt, b.attempt)
			}); first.attempt > 1 && first.attempt < math.MaxInt && !first.made.IsZero() {
				chain := first.made.Add(-time.Duration(first.attempt-2) * first.timeout)
				before = before || !chain.After(c.to.Add(tolerance))
			}
			for _, d := range t.deliveries {
				if d.leased().After(c.to.Add(tolerance)) && d.leased().Before(until) && !before && !(d.attempt > 1 && faultNear(leaseFaults, d.made)) {
					v = append(v, fmt.Sprintf("series %s paused at %s (until %s), yet occurrence %s leased at %s%s%s",
						seriesName, stamp(c.to), stamp(until), t.id, stamp(d.leased()), t.history(), calls()))
				}
			}
		}
	}
	// "Every worker runs a keeper ... a series stalls at most that long" (SeriesInterval):
	// after the last resume, with no faults nor crashes, an occurrence starts at least
	// once per interval, plus the time an occurrence may take (every attempt outlasting
	// its lease, and a backoff between) and the lateness of its start.
	gap := sl.every + maxAttempts*(sl.timeout+time.Second) + worker.DefaultSeriesInterval*11/10 + lateness
	var resumed time.Time
	for _, c := range sl.calls {
		if c.last && c.err == nil {
			resumed = c.to
		}
	}
	if !resumed.IsZero() {
		starts := []time.Time{resumed, end}
		for _, t := range occs {
			if first := t.deliveries[0].at; first.After(resumed) {
				starts = append(starts, first)
			}
		}
		slices.SortFunc(starts, time.Time.Compare)
		for i := 1; i < len(starts); i++ {
			if starts[i].Sub(starts[i-1]) > gap {
				v = append(v, fmt.Sprintf("series %s (every %s) stalled: no occurrence started from %s to %s (bound %s)%s", seriesName, sl.every,
					stamp(starts[i-1]), stamp(starts[i]), gap, calls()))
			}
		}
	}
	return v
}

// isCopy reports whether d delivers a copy of t that the README documents as a duplicate
// (Task lifecycle: "A copy they cannot see ... delivers the task once more at its
// deadline", and "A crash in the middle of a move can leave the task twice"): a later
// attempt leased from a row made within a second of a lease request's fault (a swap
// whose outcome stayed unknown, a drop that failed) or of a worker's crash (one that
// died between its markers and its swap), or after an ack that may have come after its
// lease (ackRaced), or from the marker of a delivery of such a copy (the row made when
// that one was leased) or the retry its failure wrote, or from the marker of a delivery
// whose end (a Retry's move, an ack) met a lease request's fault that may have left the
// marker ("a marker not deleted by its deadline delivers the task again").
func (t *task) isCopy(d *delivery, leaseFaults, workerCrashes []time.Time) bool {
	if d.attempt <= 1 {
		return false
	}
	if faultNear(leaseFaults, d.made) || faultNear(workerCrashes, d.made) || t.ackRaced(d) {
		return true
	}
	return slices.ContainsFunc(t.deliveries, func(e *delivery) bool {
		if e.attempt < d.attempt && d.made.Sub(e.leased()).Abs() <= tolerance &&
			(t.isCopy(e, leaseFaults, workerCrashes) || !e.ended.IsZero() && faultNear(leaseFaults, e.ended)) {
			return true
		}
		// The retry a copy's failure wrote, due Backoff after it (its move's requests may
		// take a slow request or two): the copy lives on through its retries.
		visible := d.made.Add(d.timeout)
		return e.attempt == d.attempt-1 && !e.ok && !e.ended.IsZero() &&
			!visible.Before(e.ended.Add(simBackoff-tolerance)) && !visible.After(e.ended.Add(simBackoff+2*time.Second)) &&
			t.isCopy(e, leaseFaults, workerCrashes)
	})
}

// ackRaced reports whether an earlier delivery than d succeeded so near its lease's end
// that its ack may have come after it: the marker then delivers the task again ("a marker
// not deleted by its deadline delivers the task again"). A worker sends an ack within
// AckInterval, and at once when the lease ends within twice that, so only an ack sent at
// its task's end can be late.
func (t *task) ackRaced(d *delivery) bool {
	return slices.ContainsFunc(t.deliveries, func(e *delivery) bool {
		return e.attempt < d.attempt && e.ok && !e.ended.Add(tolerance).Before(e.deadline)
	})
}

// checkKeys checks that no two tasks held one key at once: a schedule that returned
// success while another task of its key had been scheduled with success and not ended.
func (o *oracle) checkKeys() []string {
	var v []string
	for key, claims := range o.keys {
		for i, c := range claims {
			for _, d := range claims[:i] {
				other := o.tasks[d.id]
				if d.id == c.id || len(other.replays) > 0 || other.cancelledBefore(c.from) || !other.mayEnd.IsZero() && other.mayEnd.Before(c.to) {
					continue
				}
				// d held the key before c's call began, and had not ended by its end.
				if d.to.Before(c.from) && (other.cancelled.IsZero() || other.cancelled.After(c.to)) {
					v = append(v, fmt.Sprintf("key %q held by %s (scheduled %s) and %s (scheduled %s) at once%s", key, d.id, stamp(d.to), c.id, stamp(c.to), other.history()))
				}
			}
		}
	}
	return v
}

// cancelledBefore reports whether a cancel returned success before at, and the delivery
// it let finish (AfterLease) had ended or lost its lease by then.
func (t *task) cancelledBefore(at time.Time) bool {
	if t.cancelled.IsZero() || !t.cancelled.Before(at) {
		return false
	}
	if t.afterLease {
		for _, d := range t.deliveries {
			if d.leased().Before(t.cancelled) && (d.ended.IsZero() || d.ended.After(at)) && d.deadline.After(at) {
				return false
			}
		}
	}
	return true
}

// sourceOf names the row a delivery was leased from, which consumer.Task keeps to itself.
func sourceOf(ct *consumer.Task) string {
	return uuid.UUID(sourceID(ct)).String()
}

func sourceID(ct *consumer.Task) (id [16]byte) {
	v := reflect.ValueOf(ct).Elem().FieldByName("source")
	for i := range id {
		id[i] = byte(v.Index(i).Uint())
	}
	return id
}

// visibleOf is when the row a delivery was leased from became visible.
func visibleOf(ct *consumer.Task) time.Time {
	return shard.IDTime(uuid.UUID(sourceID(ct)))
}

// definite reports whether a call that returned err left the task as it was.
func definite(err error) bool {
	var inFlight *shardqtype.TaskInFlightError
	var dup *producer.DuplicateError
	return errors.Is(err, shardqtype.ErrTaskNotFound) || errors.As(err, &inFlight) || errors.As(err, &dup) ||
		errors.Is(err, shardqtype.ErrInvalid)
}

// leased is when the delivery's lease began: the consumer's clock, which the oracle
// takes as true time (its error is the cluster clock's, milliseconds).
func (d *delivery) leased() time.Time {
	if l := d.deadline.Add(-d.timeout); l.Before(d.at) {
		return l
	}
	// Its clock was ahead (not yet measured): the lease was taken before the handler ran.
	return d.at
}

// leasedFrom is the earliest true time the delivery's lease may have begun: a consumer
// whose process had not yet measured the cluster's clock dated it by its own, as far
// off as that process's skew (seed 61005317: a worker 1.9 s ahead, just restarted,
// leased an occurrence before a pause that its deadline dates after it).
func (d *delivery) leasedFrom() time.Time {
	skew := d.proc.clock.skew
	return d.leased().Add(-max(skew, -skew))
}

// replayedBetween reports whether a replay began between a and b: attempts count again
// from one after it.
func (t *task) replayedBetween(a, b time.Time) bool {
	for _, r := range t.replays {
		if r.After(a) && r.Before(b) {
			return true
		}
	}
	return false
}

// ran reports whether a handler returned success for it: at least once is met, even if
// the ack's outcome stayed unknown.
func (t *task) ran() bool {
	for _, d := range t.deliveries {
		if d.ok {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (t *task) endedBefore(at time.Time) bool { return !t.ended.IsZero() && t.ended.Before(at) }

// leftovers reads the task IDs of every task row left in the queue's partitions.
func (w *world) leftovers() map[uuid.UUID]bool {
	left := map[uuid.UUID]bool{}
	l := w.queue.Layout()
	for b := range l.BucketCount {
		for s := range l.ShardCount {
			key := shard.FormatKey(w.queue.Name, b, s)
			if err := w.admin.Scans().TaskIDs(context.Background(), key, 1000, func(id uuid.UUID) { left[id] = true }); err != nil {
				w.oracle.violations = append(w.oracle.violations, fmt.Sprintf("reading leftovers of %s: %v", key, err))
			}
		}
	}
	return left
}

// stamp prints a true time as the offset into the run (bubbles start at 2000-01-01).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).String()
}
