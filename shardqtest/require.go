package shardqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/fanout"
	"github.com/shardq/shardq/internal/taskscan"
	"github.com/shardq/shardq/shardqtype"
)

// DefaultDueWithin is how far a task's due time may lie from Match.DueAt when
// Match.DueWithin is zero: the code under test reads the clock a moment before or after
// the test does, and Cassandra keeps milliseconds.
const DefaultDueWithin = time.Second

// Match picks scheduled tasks by what a test knows of them. Zero fields match any task;
// a task must match every field set.
type Match struct {
	// Key is the task's unique key (producer.Task.Key).
	Key string
	// Payload is the task's payload, byte for byte. Use Where to compare decoded JSON.
	Payload []byte
	// DueAt is when the task is due, within DueWithin (DefaultDueWithin when zero).
	DueAt     time.Time
	DueWithin time.Duration
	// Where is any other test of the task: its priority, a field of its payload.
	Where func(*shardqtype.TaskInfo) bool
}

func (m Match) matches(t *shardqtype.TaskInfo) bool {
	within := m.DueWithin
	if within == 0 {
		within = DefaultDueWithin
	}
	switch {
	case t.State != shardqtype.TaskScheduled:
		return false
	case m.Key != "" && t.Key != m.Key:
		return false
	case m.Payload != nil && !bytes.Equal(t.Payload, m.Payload):
		return false
	case !m.DueAt.IsZero() && (t.DueAt.Before(m.DueAt.Add(-within)) || t.DueAt.After(m.DueAt.Add(within))):
		return false
	case m.Where != nil && !m.Where(t):
		return false
	}
	return true
}

// String describes m as failure messages show it.
func (m Match) String() string {
	var parts []string
	if m.Key != "" {
		parts = append(parts, fmt.Sprintf("key %q", m.Key))
	}
	if m.Payload != nil {
		parts = append(parts, "payload "+quote(m.Payload))
	}
	if !m.DueAt.IsZero() {
		within := m.DueWithin
		if within == 0 {
			within = DefaultDueWithin
		}
		parts = append(parts, fmt.Sprintf("due %s ± %v", stamp(m.DueAt), within))
	}
	if m.Where != nil {
		parts = append(parts, "Where")
	}
	if len(parts) == 0 {
		return "{any}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// RequireScheduled fails the test unless exactly one task of queue waiting for its first
// delivery (shardqtype.TaskScheduled) matches m, and returns it for further checks. Other
// tasks may be there; two that match fail it, since which one the test meant is unclear
// (RequireScheduledMany tells them apart). The failure lists every task of the queue,
// in any state, so a task a worker took already shows as in flight.
//
// It reads the queue as a worker would find it: every partition of the queue, then each
// task's state by its ID (inspect.Inspector.Task). That costs one read per partition
// (BucketCount × ShardCount), so use small queues in tests where that matters.
func RequireScheduled(ctx context.Context, t testing.TB, d *shardqtype.Driver, queue string, m Match) *shardqtype.TaskInfo {
	t.Helper()
	tasks := readQueue(ctx, t, d, queue)
	var found []*shardqtype.TaskInfo
	for _, task := range tasks {
		if m.matches(task) {
			found = append(found, task)
		}
	}
	switch len(found) {
	case 1:
		return found[0]
	case 0:
		t.Fatalf("shardqtest: no scheduled task of queue %q matches %v; %s", queue, m, list(tasks))
	default:
		t.Fatalf("shardqtest: %d scheduled tasks of queue %q match %v, want 1; %s", len(found), queue, m, list(tasks))
	}
	return nil
}

// RequireScheduledMany fails the test unless the tasks of queue waiting for their first
// delivery (shardqtype.TaskScheduled) are as many as ms and each matches a different one of
// ms, in any order; it returns them in the order of ms. With no ms it requires that
// nothing is scheduled. Tasks in flight or retrying are not counted. The failure names
// the matches left without a task and the tasks left without a match, and lists every
// task of the queue. It reads the queue as RequireScheduled does.
func RequireScheduledMany(ctx context.Context, t testing.TB, d *shardqtype.Driver, queue string, ms ...Match) []*shardqtype.TaskInfo {
	t.Helper()
	tasks := readQueue(ctx, t, d, queue)
	var scheduled []*shardqtype.TaskInfo
	for _, task := range tasks {
		if task.State == shardqtype.TaskScheduled {
			scheduled = append(scheduled, task)
		}
	}
	of := pair(ms, scheduled)
	var missing []string
	taken := make([]bool, len(scheduled))
	out := make([]*shardqtype.TaskInfo, len(ms))
	for i, j := range of {
		if j < 0 {
			missing = append(missing, fmt.Sprintf("ms[%d] %v", i, ms[i]))
			continue
		}
		taken[j], out[i] = true, scheduled[j]
	}
	var extra []string
	for j, task := range scheduled {
		if !taken[j] {
			extra = append(extra, task.ID.String())
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return out
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, "no task left for "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		why = append(why, "no match for scheduled "+strings.Join(extra, ", "))
	}
	t.Fatalf("shardqtest: want %d scheduled tasks of queue %q, one per match: %s; %s",
		len(ms), queue, strings.Join(why, "; "), list(tasks))
	return nil
}

// pair gives each match a different task that it matches, as many as can be (a maximum
// bipartite matching, by augmenting paths): taking the first task that fits can leave a
// narrower match without one. of[i] is the index of ms[i]'s task, or -1.
func pair(ms []Match, tasks []*shardqtype.TaskInfo) []int {
	fits := make([][]int, len(ms))
	for i, m := range ms {
		for j, task := range tasks {
			if m.matches(task) {
				fits[i] = append(fits[i], j)
			}
		}
	}
	holder := make([]int, len(tasks)) // the match holding each task, or -1
	for j := range holder {
		holder[j] = -1
	}
	var seen []bool
	var augment func(i int) bool
	augment = func(i int) bool {
		for _, j := range fits[i] {
			if seen[j] {
				continue
			}
			seen[j] = true
			if holder[j] < 0 || augment(holder[j]) {
				holder[j] = i
				return true
			}
		}
		return false
	}
	for i := range ms {
		seen = make([]bool, len(tasks))
		augment(i)
	}
	of := make([]int, len(ms))
	for i := range of {
		of[i] = -1
	}
	for j, i := range holder {
		if i >= 0 {
			of[i] = j
		}
	}
	return of
}

// getsInFlight bounds the task reads of readQueue running at once.
const getsInFlight = 16

// readQueue returns every task of queue with a row in its partitions (pending, in flight
// or retrying), each once, ordered by due time, failing the test when the queue cannot be
// read.
func readQueue(ctx context.Context, t testing.TB, d *shardqtype.Driver, queue string) []*shardqtype.TaskInfo {
	t.Helper()
	tasks, err := tasksOf(ctx, d, queue)
	if err != nil {
		t.Fatalf("shardqtest: reading the tasks of queue %q: %v", queue, err)
	}
	return tasks
}

func tasksOf(ctx context.Context, d *shardqtype.Driver, queue string) ([]*shardqtype.TaskInfo, error) {
	q, err := shardq.LoadQueue(ctx, d, queue)
	if err != nil {
		return nil, err
	}
	ids, err := taskscan.TaskIDs(ctx, d, q, inspect.DefaultPartitionsInFlight, taskscan.PageSize)
	if err != nil {
		return nil, err
	}
	// A task found in two rows (a move cut short) is one task.
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)
	in, err := inspect.New(d, inspect.Config{})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var tasks []*shardqtype.TaskInfo
	err = fanout.Each(len(ids), getsInFlight, func(i int) error {
		info, err := in.Task(ctx, ids[i])
		switch {
		case errors.Is(err, shardqtype.ErrTaskNotFound):
			return nil // acked or cancelled since its row was read
		case err != nil:
			return fmt.Errorf("reading task %s: %w", ids[i], err)
		}
		mu.Lock()
		defer mu.Unlock()
		tasks = append(tasks, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(tasks, func(a, b *shardqtype.TaskInfo) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	return tasks, nil
}

// maxListed bounds the tasks a failure lists.
const maxListed = 50

// list describes tasks for a failure message, one a line.
func list(tasks []*shardqtype.TaskInfo) string {
	if len(tasks) == 0 {
		return "the queue holds no task"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the queue holds %d tasks:", len(tasks))
	for i, t := range tasks {
		if i == maxListed {
			fmt.Fprintf(&b, "\n  ... and %d more", len(tasks)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n  %s  %-9s  due %s  priority %d  attempt %d", t.ID, t.State, stamp(t.DueAt), t.Priority, t.Attempt)
		if t.Key != "" {
			fmt.Fprintf(&b, "  key %q", t.Key)
		}
		b.WriteString("  payload " + quote(t.Payload))
	}
	return b.String()
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// maxShown bounds the payload bytes a message shows.
const maxShown = 80

func quote(payload []byte) string {
	if len(payload) > maxShown {
		return fmt.Sprintf("%q... (%d bytes)", payload[:maxShown], len(payload))
	}
	return fmt.Sprintf("%q", payload)
}
