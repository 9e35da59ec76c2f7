package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/shard"
)

// The task_index table: PRIMARY KEY ((minute, slot), task_id).
const (
	colIdxQueue = iota
	colIdxKey
	colIdxState
	colIdxRowKey
	colIdxRowPriority
	colIdxRowID
	colIdxPrevState
	colIdxPrevKey
	colIdxPrevPriority
	colIdxPrevID
	colIdxDueAt
	colIdxAttempt
	colIdxDeliveries
	colIdxError
	colIdxDoneAt
)

type index struct{ *client }

// indexPK is taskindex's partition of id, as text.
func indexPK(id uuid.UUID) string {
	minute := int32(shard.IDTime(id).Unix() / 60)
	slot := int8(binary.BigEndian.Uint64(id[8:]) % taskindex.Slots)
	return strconv.Itoa(int(minute)) + ":" + strconv.Itoa(int(slot))
}

func indexCK(id uuid.UUID) string { return ckUUID(id, false) }

// indexOps are the statements of w (taskindex.Write.stmts), each with its timestamp.
func indexOps(w taskindex.Write) ([]op, []int64, error) {
	id := w.Entry.TaskID
	if err := checkUUIDs(id); err != nil {
		return nil, nil, err
	}
	ck, key := indexCK(w.Entry.TaskID), []any{id}
	switch {
	case w.Delete:
		return []op{{ck: ck, key: key, delete: true}}, []int64{w.Stamp}, nil
	}
	var ops []op
	var stamps []int64
	if w.Replace {
		ops, stamps = append(ops, op{ck: ck, key: key, delete: true}), append(stamps, w.Stamp-1)
	}
	e := w.Entry
	sets := []set{{colIdxState, int8(e.State)}}
	if e.Key != "" {
		sets = append(sets, set{colIdxKey, e.Key})
	}
	if e.State.Final() {
		sets = append(sets, set{colIdxQueue, e.Queue}, set{colIdxAttempt, int32(e.Attempt)}, set{colIdxDeliveries, e.Token},
			set{colIdxDoneAt, timestamp(e.DoneAt)})
		if !e.DueAt.IsZero() {
			sets = append(sets, set{colIdxDueAt, timestamp(e.DueAt)})
		}
		if e.Error != "" {
			sets = append(sets, set{colIdxError, e.Error})
		}
	}
	if e.Row.Key != "" {
		if err := checkUUIDs(e.Row.ID); err != nil {
			return nil, nil, err
		}
		sets = append(sets, set{colIdxRowKey, e.Row.Key}, set{colIdxRowPriority, e.Row.Priority}, set{colIdxRowID, e.Row.ID})
	}
	if e.Prev.Key != "" {
		if err := checkUUIDs(e.Prev.ID); err != nil {
			return nil, nil, err
		}
		sets = append(sets, set{colIdxPrevState, int8(e.PrevState)}, set{colIdxPrevKey, e.Prev.Key},
			set{colIdxPrevPriority, e.Prev.Priority}, set{colIdxPrevID, e.Prev.ID})
	}
	ttl, err := ttlSeconds(max(int64(w.TTL/time.Second), 1))
	if err != nil {
		return nil, nil, err
	}
	return append(ops, op{ck: ck, key: key, insert: true, sets: sets, ttl: ttl}), append(stamps, w.Stamp), nil
}

func (x index) Write(ctx context.Context, ws []taskindex.Write, _ int) (failed []int, err error) {
	if len(ws) == 0 {
		return nil, nil
	}
	groups := map[string][]int{}
	var order []string
	for i, w := range ws {
		pk := indexPK(w.Entry.TaskID)
		if _, ok := groups[pk]; !ok {
			order = append(order, pk)
		}
		groups[pk] = append(groups[pk], i)
	}
	bad := make([]bool, len(order))
	err = each(len(order), func(i int) error {
		pk := order[i]
		err := x.exec(ctx, Request{Table: "task_index", Op: "Index.Write", Key: pk, Write: true}, func(s *state) error {
			var ops []op
			var stamps []int64
			for _, j := range groups[pk] {
				o, st, err := indexOps(ws[j])
				if err != nil {
					return err
				}
				ops, stamps = append(ops, o...), append(stamps, st...)
			}
			for k, o := range ops {
				s.apply(s.c.index, pk, o, stamps[k])
			}
			return nil
		})
		if err != nil {
			bad[i] = true
			return fmt.Errorf("writing the task index: %w", err)
		}
		return nil
	})
	for i, b := range bad {
		if b {
			failed = append(failed, groups[order[i]]...)
		}
	}
	return failed, err
}

func (x index) Read(ctx context.Context, id uuid.UUID) (taskindex.Entry, int64, error) {
	pk := indexPK(id)
	type got struct {
		e     taskindex.Entry
		stamp int64
	}
	var g *got
	q := query{req: Request{Table: "task_index", Op: "Index.Read", Key: pk}, t: x.c.index, pk: pk,
		slices: []slice{point(indexCK(id))}, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, x.client, q, func(s *state, r *row) got {
		v := func(col int) any { return r.value(col, s.sec) }
		e := taskindex.Entry{TaskID: id, Key: stringOf(v(colIdxKey)), State: taskindex.State(int8Of(v(colIdxState))),
			PrevState: taskindex.State(int8Of(v(colIdxPrevState))), DueAt: timeOf(v(colIdxDueAt)), DoneAt: timeOf(v(colIdxDoneAt)),
			Attempt: int(int32Of(v(colIdxAttempt))), Token: int64Of(v(colIdxDeliveries)), Error: stringOf(v(colIdxError)),
			Queue: stringOf(v(colIdxQueue))}
		if v(colIdxRowKey) != nil && v(colIdxRowID) != nil {
			e.Row = taskindex.Loc{Key: stringOf(v(colIdxRowKey)), Priority: int8Of(v(colIdxRowPriority)), ID: uuidOf(v(colIdxRowID))}
		}
		if v(colIdxPrevKey) != nil && v(colIdxPrevID) != nil {
			e.Prev = taskindex.Loc{Key: stringOf(v(colIdxPrevKey)), Priority: int8Of(v(colIdxPrevPriority)), ID: uuidOf(v(colIdxPrevID))}
		}
		// Entries of tasks still moving leave the queue out: their rows' keys name it.
		for _, at := range []taskindex.Loc{e.Row, e.Prev} {
			if e.Queue == "" && at.Key != "" {
				e.Queue, _, _, _ = shard.ParseKey(at.Key)
			}
		}
		stamp, _ := r.stamp(colIdxState, s.sec)
		return got{e, stamp}
	}, func(v got) bool { g = &v; return true })
	switch {
	case err != nil:
		return taskindex.Entry{}, 0, fmt.Errorf("reading the task index: %w", err)
	case g == nil:
		return taskindex.Entry{}, 0, taskindex.ErrNotFound
	}
	return g.e, g.stamp, nil
}
