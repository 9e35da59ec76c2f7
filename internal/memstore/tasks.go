package memstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
)

// The tasks table: PRIMARY KEY (shard_key, kind, priority, id), clustering order
// (kind ASC, priority DESC, id ASC).
const (
	colTaskID = iota
	colPayload
	colDueAt
	colTimeout
	colAttempt
	colDeliveries
	colKeyed
	colSeries
	colRetrying
	colHeaders
	colTaskKind
	colLockHolder
	colLockToken
	colFloorBucket
	colFloors
)

// Row kinds.
const (
	kindLock    = 0
	kindTask    = 1
	kindReceipt = 2
)

func taskCK(kind, priority int8, id uuid.UUID) string {
	return ckInt8(kind, false) + ckInt8(priority, true) + ckUUID(id, false)
}

func taskKey(kind, priority int8, id uuid.UUID) []any { return []any{kind, priority, id} }

// rowCK is the clustering key of task row r.
func rowCK(r taskrow.Row) string { return taskCK(kindTask, r.Priority, r.ID) }

// errTimeUUID is a node's answer to a timeuuid column bound to another UUID version.
func errTimeUUID() error { return invalid("Invalid version for TimeUUID type.") }

// checkUUIDs rejects what a node rejects: timeuuids of another version.
func checkUUIDs(ids ...uuid.UUID) error {
	for _, id := range ids {
		if !validTimeUUID(id) {
			return errTimeUUID()
		}
	}
	return nil
}

// insertOp is taskrow.Row.Insert and InsertLWT: the row marker and every cell, the
// optional columns only when set.
func insertOp(r taskrow.Row) (op, error) {
	if err := checkUUIDs(r.ID, r.TaskID); err != nil {
		return op{}, err
	}
	sets := []set{
		{colTaskID, r.TaskID}, {colPayload, blob(r.Payload)}, {colDueAt, timestamp(r.DueAt)},
		{colTimeout, r.Timeout.Milliseconds()}, {colAttempt, int32(r.Attempt)}, {colDeliveries, r.Token},
	}
	if r.Keyed {
		sets = append(sets, set{colKeyed, true})
	}
	if r.Series != "" {
		sets = append(sets, set{colSeries, r.Series})
	}
	if r.Retrying {
		sets = append(sets, set{colRetrying, true})
	}
	if len(r.Headers) > 0 {
		sets = append(sets, set{colHeaders, maps.Clone(r.Headers)})
	}
	if r.Kind != "" {
		sets = append(sets, set{colTaskKind, r.Kind})
	}
	return op{ck: rowCK(r), key: taskKey(kindTask, r.Priority, r.ID), insert: true, sets: sets}, nil
}

// deleteOp is the Cassandra store's delete of a task row (and its delete-if-exists,
// whose condition is the caller's).
func deleteOp(r taskrow.Row) (op, error) {
	if err := checkUUIDs(r.ID); err != nil {
		return op{}, err
	}
	return op{ck: rowCK(r), key: taskKey(kindTask, r.Priority, r.ID), delete: true}, nil
}

// taskRow reads r as the Cassandra store's range reads do.
func taskRow(key string, r *row, sec int64) taskrow.Row {
	return taskrow.Row{
		Key:      key,
		Priority: r.key[1].(int8),
		ID:       r.key[2].(uuid.UUID),
		TaskID:   uuidOf(r.value(colTaskID, sec)),
		Payload:  readBlob(r.value(colPayload, sec)),
		DueAt:    timeOf(r.value(colDueAt, sec)),
		Timeout:  time.Duration(int64Of(r.value(colTimeout, sec))) * time.Millisecond,
		Attempt:  int(int32Of(r.value(colAttempt, sec))),
		Token:    int64Of(r.value(colDeliveries, sec)),
		Keyed:    boolOf(r.value(colKeyed, sec)),
		Series:   stringOf(r.value(colSeries, sec)),
		Retrying: boolOf(r.value(colRetrying, sec)),
		Headers:  headersOf(r.value(colHeaders, sec)),
		Kind:     stringOf(r.value(colTaskKind, sec)),
	}
}

// Values as the driver scans them into Go values: null reads as the zero value.
func uuidOf(v any) uuid.UUID { u, _ := v.(uuid.UUID); return u }
func timeOf(v any) time.Time { t, _ := v.(time.Time); return t }
func int64Of(v any) int64    { n, _ := v.(int64); return n }
func int32Of(v any) int32    { n, _ := v.(int32); return n }
func int8Of(v any) int8      { n, _ := v.(int8); return n }
func boolOf(v any) bool      { b, _ := v.(bool); return b }
func stringOf(v any) string  { s, _ := v.(string); return s }

// headersOf reads a frozen map as the driver does: null is a nil map.
func headersOf(v any) map[string]string {
	h, _ := v.(map[string]string)
	return maps.Clone(h)
}
func prioSlices(kind int8, prios []int8, lo, hi uuid.UUID) []slice {
	sls := make([]slice, len(prios))
	for i, p := range prios {
		sls[i] = slice{lo: taskCK(kind, p, lo), hi: taskCK(kind, p, hi), hiIn: true}
	}
	return sls
}

type tasks struct{ *client }

func (t tasks) req(op, key string, write, conditional, serial bool) Request {
	return Request{Table: "tasks", Op: op, Key: key, Write: write, Conditional: conditional, Serial: serial}
}

func (t tasks) Write(ctx context.Context, muts []store.Mutation) error {
	if len(muts) == 0 {
		return nil
	}
	keys := map[string]bool{}
	for _, m := range muts {
		keys[m.Row.Key] = true
	}
	stamp := t.clientStamp()
	return t.exec(ctx, t.req("Tasks.Write", muts[0].Row.Key, true, false, false), func(s *state) error {
		ops := make([]op, len(muts))
		stamps := make([]int64, len(muts))
		for i, m := range muts {
			var err error
			switch m.Op {
			case store.Insert:
				ops[i], err = insertOp(m.Row)
				stamps[i] = m.Stamp
			case store.Delete:
				ops[i], err = deleteOp(m.Row)
				stamps[i] = stamp
				if m.Stamp != 0 {
					stamps[i] = m.Stamp
				}
			default:
				panic(fmt.Sprintf("memstore: mutation %d has no plain statement", m.Op))
			}
			if err != nil {
				return err
			}
		}
		for i, o := range ops {
			s.apply(s.c.tasks, muts[i].Row.Key, o, stamps[i])
		}
		return nil
	})
}

// cas is a conditional batch (or statement) on partition key of the tasks table: check
// tells, on the partition as it is, whether it applies, and build returns its writes,
// all stamped by the ballot.
func (t tasks) cas(ctx context.Context, op, key string, check func(s *state) bool, build func() ([]op, error)) (bool, error) {
	applied := false
	err := t.exec(ctx, t.req(op, key, true, true, false), func(s *state) error {
		ops, err := build()
		if err != nil {
			return err
		}
		ballot := s.serverStamp()
		if applied = check(s); applied {
			for _, o := range ops {
				s.apply(s.c.tasks, key, o, ballot)
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// exists reports whether task row r has live data.
func (s *state) exists(r taskrow.Row) bool {
	row := s.get(s.c.tasks, r.Key, rowCK(r))
	return row != nil && row.live(s.sec)
}

func (t tasks) Apply(ctx context.Context, muts []store.Mutation) (bool, error) {
	if len(muts) == 0 {
		return false, nil
	}
	key := muts[0].Row.Key
	if muts[0].Op == store.Release {
		key = muts[0].Lock.Key
	}
	check := func(s *state) bool {
		for _, m := range muts {
			switch m.Op {
			case store.DeleteIfExists:
				if !s.exists(m.Row) {
					return false
				}
			case store.Release:
				if !s.holds(m.Lock) {
					return false
				}
			}
		}
		return true
	}
	build := func() ([]op, error) {
		var ops []op
		for _, m := range muts {
			var o op
			var err error
			switch m.Op {
			case store.Insert:
				o, err = insertOp(m.Row)
			case store.Delete, store.DeleteIfExists:
				o, err = deleteOp(m.Row)
			case store.Release:
				rel, err := releaseOps(m.Lock, nil)
				if err != nil {
					return nil, err
				}
				ops = append(ops, rel...)
				continue
			}
			if err != nil {
				return nil, err
			}
			ops = append(ops, o)
		}
		return ops, nil
	}
	return t.cas(ctx, "Tasks.Apply", key, check, build)
}

func (t tasks) DeleteIfExists(ctx context.Context, r taskrow.Row) (bool, error) {
	return t.cas(ctx, "Tasks.DeleteIfExists", r.Key, func(s *state) bool { return s.exists(r) },
		func() ([]op, error) { o, err := deleteOp(r); return []op{o}, err })
}

func (t tasks) Exists(ctx context.Context, r taskrow.Row) (bool, error) {
	there := false
	q := query{req: t.req("Tasks.Exists", r.Key, false, false, true), t: t.c.tasks, pk: r.Key,
		slices: []slice{point(rowCK(r))}, limit: math.MaxInt}
	err := read(ctx, t.client, q, func(*state, *row) bool { return true }, func(bool) bool { there = true; return true })
	return err == nil && there, err
}

func (t tasks) Read(ctx context.Context, key string, priority int8, id uuid.UUID) (taskrow.Row, bool, error) {
	return t.one(ctx, "Tasks.Read", key, []slice{point(taskCK(kindTask, priority, id))})
}

func (t tasks) Find(ctx context.Context, key string, priorities []int8, id uuid.UUID) (taskrow.Row, bool, error) {
	sls := make([]slice, len(priorities))
	for i, p := range priorities {
		sls[i] = point(taskCK(kindTask, p, id))
	}
	return t.one(ctx, "Tasks.Find", key, sls)
}

// one reads the first row of sls, as store's tasks.one does.
func (t tasks) one(ctx context.Context, op, key string, sls []slice) (taskrow.Row, bool, error) {
	var rows []taskrow.Row
	q := query{req: t.req(op, key, false, false, false), t: t.c.tasks, pk: key, slices: sls, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, t.client, q, func(s *state, r *row) taskrow.Row { return taskRow(key, r, s.sec) },
		func(r taskrow.Row) bool { rows = append(rows, r); return true })
	if err != nil || len(rows) == 0 {
		return taskrow.Row{}, false, err
	}
	return rows[0], true, nil
}

// defaultPageSize is gocql's page size for a query that sets none.
const defaultPageSize = 5000
