package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/locking"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/scanplan"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/taskmeta"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// takeAll takes up to n tasks from the partitions with rows available, in parallel
// rounds. Each round hands out what is still wanted in scan order, each partition as
// much as it was seen to have, so a backlogged partition fills a whole batch with one
// lock and one swap while a trickle is gathered from many at once. A partition that gave
// all it was asked and may hold more goes back in line. Every round either retires
// partitions or gains tasks, so the loop ends. Shards another consumer holds are
// skipped, and a partition that fails is reported and skipped.
func (c *Consumer) takeAll(ctx context.Context, parts []scanplan.Part, n int, now time.Time) []*Task {
	var line []scanplan.Part
	for _, pt := range parts {
		if pt.Avail > 0 && pt.Err == nil {
			line = append(line, pt)
		}
	}
	var out []*Task
	for len(line) > 0 && len(out) < n {
		var round []scanplan.Part
		var shares []int
		for want := n - len(out); len(line) > 0 && want > 0; line = line[1:] {
			share := min(line[0].Avail, want)
			round, shares = append(round, line[0]), append(shares, share)
			want -= share
		}
		got := make([][]*Task, len(round))
		full := make([]bool, len(round))
		errs := make([]error, len(round))
		var written touchSet
		_ = fanout.Each(len(round), c.cfg.PartitionsInFlight, func(i int) error {
			got[i], full[i], errs[i] = c.take(ctx, &round[i], shares[i], now, &written)
			if err := errs[i]; err != nil && !errors.Is(err, locking.ErrLockHeld) {
				c.observeFailure(ctx, round[i].Key, "take", err)
			}
			return nil
		})
		// A take told to crash (tests) stands for a process that died: nothing is touched.
		if len(written.rows) > 0 && !slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, errCrashed) }) {
			c.touch(ctx, written.rows)
		}
		for i, g := range got {
			if len(g) == 0 && (!round[i].Blind || errs[i] != nil) {
				// Seen to hold due rows but skipped (its lock was held, its swap did not
				// apply, or it failed): try again soon rather than sleep past them. A busy
				// partition taken without a peek that had none is peeked next time.
				c.plan.Skipped(&round[i], now)
			}
			out = append(out, g...)
			if full[i] && round[i].Avail >= scanplan.PeekLimit {
				line = append(line, round[i])
			}
		}
	}
	return out
}

// take leases up to want due rows of one partition. It reports whether it found as many
// rows as it read for (the partition may hold more).
func (c *Consumer) take(ctx context.Context, pt *scanplan.Part, want int, now time.Time, written *touchSet) ([]*Task, bool, error) {
	if err := c.loadFloors(ctx, pt); err != nil {
		return nil, false, err
	}
	t0 := time.Now()
	lk, err := c.locker.Acquire(ctx, pt.Key)
	if errors.Is(err, locking.ErrLockHeld) {
		c.cfg.Observer.Observe(ctx, shardqtype.LockContended{Queue: c.q.Name, PartitionKey: pt.Key})
	}
	if err != nil {
		return nil, false, err
	}
	lockWait := time.Since(t0)
	rows, s, err := c.lockedRead(ctx, pt, want, now)
	full := err == nil && s.Cut()
	if err == nil {
		c.plan.Dense(pt, len(rows) >= scanplan.PeekLimit/10)
	}
	// Hot (tried before any peek next time) only when the partition was seen or assumed to
	// hold a PeekLimit or more and gave all that was read for: a backlog. Under a steady
	// stream a take read for what its peek counted usually fills up too, with rows come due
	// since, yet the partition holds a few more at most, and taking it blind next time
	// would cost a lock and a read where a peek finds that.
	c.plan.Taken(pt, full && pt.Avail >= scanplan.PeekLimit)
	if err != nil || len(rows) == 0 {
		if err == nil {
			c.plan.Read(pt, s)
			c.plan.Consumed(pt, now)
		} else {
			c.plan.Forget(pt)
		}
		return nil, false, errors.Join(err, c.release(ctx, lk))
	}
	if c.beforeSwap != nil {
		c.beforeSwap()
	}
	tasks, err := c.swap(ctx, pt, lk, rows, s, now, written)
	if err == nil && len(tasks) > 0 && (!full || !pt.Blind && len(rows) >= pt.Avail) {
		// Every row visible at now was taken (the read stopped short, or read all its peek
		// counted): what pt's last peek saw coming due after now still is, unless its cell
		// shows a write since.
		c.plan.Consumed(pt, now)
	} else {
		c.plan.Forget(pt)
	}
	if len(tasks) > 0 {
		c.cfg.Observer.Observe(ctx, shardqtype.BatchAcquired{Queue: c.q.Name, PartitionKey: pt.Key, Size: len(tasks), LockWait: lockWait})
	}
	return tasks, full, err
}

// lockedRead reads up to want visible rows of pt above its floors, and at most
// MaxTakeBytes of payload and headers, highest priority first. The span is cut when the
// read stopped at either limit.
func (c *Consumer) lockedRead(ctx context.Context, pt *scanplan.Part, want int, now time.Time) ([]taskrow.Row, scanplan.Span, error) {
	s := scanplan.NewSpan(now)
	if c.failRead != nil {
		if err := c.failRead(pt.Key); err != nil {
			return nil, s, err
		}
	}
	pageRows := c.plan.PageRows()
	var rows []taskrow.Row
	bytes := 0
	for _, g := range c.plan.TakeGroups(pt) {
		rest := want - len(rows)
		got, cut, err := c.leasing.Rows(ctx, pt.Key, g.Prios, g.Floor, shard.MaxID(now), rest, min(rest, pageRows), MaxTakeBytes-bytes)
		if err != nil {
			return nil, s, wrapErr("reading", pt.Key, err)
		}
		for _, r := range got {
			s.Note(r.Priority, r.ID)
			size := r.Size()
			bytes += size
			c.plan.SawPayload(size)
		}
		rows = append(rows, got...)
		s.Cover(g, cut || len(got) == rest)
		if s.Cut() {
			break
		}
	}
	return rows, s, nil
}

// swap leases rows: it writes a timeout marker per task into the partition of its
// deadline, then deletes the rows and releases the lock in one conditional batch that
// applies only while lk still has the lock and every expired marker among rows still
// exists (its holder may be acking it right now). The batch also records the partition's
// new floors and leaves lk's receipt, which settles an unknown outcome. Markers of
// a swap that did not apply are deleted. The markers written are added to written,
// whose signal cells the caller touches.
func (c *Consumer) swap(ctx context.Context, pt *scanplan.Part, lk *locking.Lock, rows []taskrow.Row, s scanplan.Span, now time.Time, written *touchSet) ([]*Task, error) {
	leased, err := c.notEnded(ctx, rows)
	if err != nil {
		// Nothing written yet: the partition is read afresh next time.
		return nil, errors.Join(wrapErr("looking up tasks in", pt.Key, err), c.release(ctx, lk))
	}
	leased = onePerTask(leased)
	tasks := make([]*Task, len(leased))
	markers := make([]taskrow.Row, len(leased))
	for i, r := range leased {
		deadline := now.Add(r.Timeout)
		markers[i] = c.marker(r, deadline)
		markers[i].Attempt++
		markers[i].Token++
		markers[i].Retrying = false
		tasks[i] = &Task{ID: r.TaskID, Queue: c.q.Name, Payload: r.Payload, DueAt: r.DueAt,
			Priority: int(r.Priority), Attempt: max(1, markers[i].Attempt-taskmeta.Int(r.Headers, taskmeta.Snoozes)), Deadline: deadline, Timeout: r.Timeout,
			Token: markers[i].Token, Series: r.Series, Headers: maps.Clone(r.Headers), Kind: r.Kind, marker: markers[i],
			source: r.ID}
	}
	// The index learns of the move before it happens: if the swap then fails, the entry
	// names the rows read as the previous place, which readers find still there.
	index := make([]taskindex.Write, len(leased))
	for i, r := range leased {
		index[i] = c.moveEntry(tasks[i], taskindex.InFlight, markers[i], rowState(r), r, taskindex.LeaseStep(lk.Token()))
	}
	var indexErr error
	indexed := make(chan struct{})
	go func() {
		defer close(indexed)
		// With the index writes of the takes running beside this one, when any is in flight.
		indexErr = c.moves.Write(ctx, "", index, 0)
	}()
	ts, err := c.writeMarkers(ctx, markers, written)
	<-indexed
	if err = errors.Join(err, indexErr); err != nil {
		c.dropMarkers(ctx, markers, ts)
		return nil, errors.Join(wrapErr("writing markers for", pt.Key, err), c.release(ctx, lk))
	}
	if c.crashed("swap") {
		return nil, errCrashed
	}

	floors := c.plan.SwapFloors(pt, s)
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		applied, err := c.leasing.Swap(ctx, lk.Ref(), pt.Bucket, floors, rows)
		if c.afterSwap != nil {
			err = c.afterSwap(err)
		}
		return applied, err
	}, func(rctx context.Context, cause error) (bool, error) { return c.settleSwap(rctx, lk, cause) })
	switch {
	case err != nil && lwt.Definite(err):
		c.dropMarkers(ctx, markers, ts)
		return nil, errors.Join(wrapErr("swapping in", pt.Key, err), c.release(ctx, lk))
	case err != nil:
		// Unsettled: the markers stay, so the tasks come back at their deadline if the
		// swap applied; if it did not, they are also still pending. A duplicate, never a
		// loss.
		return nil, err
	}
	if !applied {
		// The lock expired under us, or a marker we meant to redeliver was acked first.
		// Nothing changed; the partition is read afresh next time.
		c.log.DebugContext(ctx, "swap not applied", "partition_key", pt.Key)
		c.dropMarkers(ctx, markers, ts)
		return nil, c.release(ctx, lk)
	}
	if c.crashed("swapped") {
		return nil, errCrashed
	}
	c.plan.Swapped(pt, s)
	c.advanceSeries(ctx, tasks, true)
	c.log.DebugContext(ctx, "leased tasks", "partition_key", pt.Key, "tasks", len(tasks), "lock_token", lk.Token())
	return tasks, nil
}

// onePerTask returns rows with one row per task: of two copies of a task (a marker
// orphaned by a crashed or failed swap beside the task's live row), the one with the
// higher token, then attempt. The swap deletes every copy and leases the task once, so a
// copy does not run beside the task it copies.
func onePerTask(rows []taskrow.Row) []taskrow.Row {
	at := make(map[uuid.UUID]int, len(rows))
	out := make([]taskrow.Row, 0, len(rows))
	for _, r := range rows {
		i, seen := at[r.TaskID]
		switch {
		case !seen:
			at[r.TaskID] = len(out)
			out = append(out, r)
		case r.Token > out[i].Token || (r.Token == out[i].Token && r.Attempt > out[i].Attempt):
			out[i] = r
		}
	}
	return out
}

// notEnded returns rows without the copies of tasks whose index entry says they ended,
// copies the cancel or ack that ended the task could not see: timeout markers a lease
// fault left behind (a swap whose outcome stayed unknown, a drop that failed), retry rows
// a lease move left (a Retry whose drop of its new row failed, or whose unknown outcome
// was settled as applied because a cancel had deleted the old marker), and rows a
// Reschedule moved the task to (an ID other than the task's) beside an old row it crashed
// before deleting, which a lease of the old row then stopped the entry naming; and
// without markers an declared lease outranks (outranked). The swap deletes them with the
// others. A moved row never delivered whose token is above the ended entry's is a dead
// letter's replay, a new life of the task, and runs. A task is looked up when one of its
// rows was delivered before or moved, and then each of its rows read is judged; the rows
// of other tasks, never delivered, are their first, found from the task's ID and deleted
// under their partition's lock by whoever ends the task.
// A lookup that fails fails the take, leasing nothing: the row may be the copy of a task
// cancelled since, which must never run again.
func (c *Consumer) notEnded(ctx context.Context, rows []taskrow.Row) ([]taskrow.Row, error) {
	type lookup struct {
		e     taskindex.Entry
		token int64 // the delivery the entry was written for
		found bool
		named bool // the row the entry names exists
	}
	at := map[uuid.UUID]int{} // the tasks looked up: with a row delivered before, or moved
	var ids []uuid.UUID
	for _, r := range rows {
		if _, ok := at[r.TaskID]; !ok && (r.Attempt > 0 || r.ID != r.TaskID) {
			at[r.TaskID] = len(ids)
			ids = append(ids, r.TaskID)
		}
	}
	if len(ids) == 0 {
		return rows, nil
	}
	found := make([]lookup, len(ids))
	err := fanout.Each(len(ids), c.cfg.PartitionsInFlight, func(i int) error {
		id := ids[i]
		if c.failLookup != nil {
			if err := c.failLookup(id); err != nil {
				return err
			}
		}
		e, stamp, err := c.state.Store.Index().Read(ctx, id)
		switch {
		case errors.Is(err, taskindex.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("looking up task %s: %w", id, err)
		}
		l := lookup{e: e, token: taskindex.Delivery(id, stamp), found: true}
		if slices.ContainsFunc(rows, func(r taskrow.Row) bool { return r.TaskID == ids[i] && outranked(e, l.token, r) }) {
			// Only a lease that took effect outranks: an declaration whose move failed
			// names rows that are gone, while the copy at hand is the task's.
			named := taskrow.Row{Key: e.Row.Key, Priority: e.Row.Priority, ID: e.Row.ID, TaskID: ids[i]}
			if l.named, err = c.state.Store.Tasks().Exists(ctx, named); err != nil {
				return fmt.Errorf("looking up the lease of task %s: %w", id, err)
			}
		}
		found[i] = l
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Row by row, not one per task: of two copies read together, the one a lease
	// outranks goes and the other, which the entry names, stays.
	out := make([]taskrow.Row, 0, len(rows))
	for _, r := range rows {
		if i, ok := at[r.TaskID]; ok && found[i].found {
			l := found[i]
			// A row never delivered that the entry's delivery does not reach is a later life
			// of the task, a dead letter's replay, which its cancel or death did not end.
			if l.e.State.Final() && (r.Attempt > 0 || r.Token <= l.e.Token) || l.named && outranked(l.e, l.token, r) {
				c.log.DebugContext(ctx, "dropping a copy of a task", "task_id", r.TaskID, "row_id", r.ID)
				continue
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// outranked reports whether r may be a timeout marker a later lease of its task left
// behind: the entry, written at delivery token, declares a lease (or its holder's move)
// of the task at r's delivery or a later one, and names neither r nor r as the place it
// left. Two takes of one row make two markers of one delivery; a take that died before
// its swap leaves one, which would deliver the task beside the lease in force. But an
// declaration comes before its move, and a move that failed (a take whose swap did not
// apply, an Extend or Retry that lost a race or met a fault) leaves an entry naming rows
// that are gone while r is the task: r goes only when the row the entry names exists
// (notEnded reads it), so the task lives there.
func outranked(e taskindex.Entry, token int64, r taskrow.Row) bool {
	at := loc(r)
	return e.State == taskindex.InFlight && r.Attempt > 0 && !r.Retrying && r.Token <= token &&
		e.Row != at && e.Prev != at
}

// marker returns r's timeout marker visible at at: a copy of the row in the partition of
// at's bucket, in the same concurrency shard.
func (c *Consumer) marker(r taskrow.Row, at time.Time) taskrow.Row {
	m := r
	m.ID = shard.NewID(at)
	// The layout in force at the deadline, whichever ring r was taken from: markers
	// leave a layout that is draining, so it only empties.
	l := c.state.Place(c.q, at, c.cfg.Clock.Now())
	m.Key = l.Key(l.Bucket(at), l.ShardFor(r.TaskID))
	return m
}

// writeMarkers writes rows with plain batches, one partition and a bounded size each,
// and has their signal cells touched whatever the outcome: a marker whose write failed may
// have applied, and a marker nobody deletes again (an unsettled swap keeps them) must be
// found when it comes due. With written nil they are touched at once. A take passes its
// round's written instead: the round touches the cells of every take's markers in one
// write once its takes are over. Their markers share a bucket (their leases' deadline's)
// and so a signal row: touched take by take, a round of takes from every shard cost as
// many touches as takes. A consumer that dies before that touch leaves no marker in a
// cell nothing touched: the store announces every marker's cell before writing it
// (signal.Announcer), so consumers that read its partition later in the lap see it.
// It returns the write timestamp, which dropMarkers needs.
func (c *Consumer) writeMarkers(ctx context.Context, rows []taskrow.Row, written *touchSet) (int64, error) {
	ts := c.cluster.Stamp(c.cfg.Clock.Now())
	// Before the write: a process that dies between its markers and its swap leaves copies
	// of these tasks, and this line tells whose they are.
	if c.log.Enabled(ctx, slog.LevelDebug) {
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.TaskID.String()
		}
		c.log.DebugContext(ctx, "writing markers", "queue", c.q.Name, "task_ids", ids)
	}
	err := c.leasing.WriteMarkers(ctx, rows, ts, c.cfg.PartitionsInFlight)
	if written == nil {
		c.touch(ctx, rows)
		return ts, err
	}
	written.add(rows)
	return ts, err
}

// touchSet gathers the markers written by a round of takes, for one touch of their cells.
type touchSet struct {
	mu   sync.Mutex
	rows []taskrow.Row
}

func (t *touchSet) add(rows []taskrow.Row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, rows...)
}

// dropMarkers deletes markers of a swap that did not apply, written at ts. Their IDs are
// new, so the deletes touch nothing else. One that cannot be deleted delivers its task
// once more at its deadline: a duplicate, never a loss.
func (c *Consumer) dropMarkers(ctx context.Context, rows []taskrow.Row, ts int64) {
	rctx, cancel := lwt.ResolveContext(ctx)
	defer cancel()
	if err := c.leasing.DropMarkers(rctx, rows, ts, c.cfg.PartitionsInFlight); err != nil {
		c.log.WarnContext(ctx, "deleting the markers of a swap that did not apply; their tasks may run twice", "queue", c.q.Name, "error", err)
	}
}

func (c *Consumer) release(ctx context.Context, lk *locking.Lock) error {
	if err := lk.Release(ctx); err != nil && !errors.Is(err, locking.ErrLockLost) {
		return wrapErr("releasing", lk.Key(), err)
	}
	return nil
}

// settleSwap decides a swap whose outcome is unknown by its receipt (locking.Lock.Settle).
func (c *Consumer) settleSwap(rctx context.Context, lk *locking.Lock, cause error) (bool, error) {
	c.log.WarnContext(rctx, "swap outcome unknown, settling", "partition_key", lk.Key(), "error", cause)
	applied, err := lk.Settle(rctx)
	if err != nil {
		return false, fmt.Errorf("swap in %s: %w: %w", lk.Key(), cause, err)
	}
	return applied, nil
}
