package memstore

import (
	"context"
	"math"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
)

type leasing struct{ *client }

func (l leasing) req(op, key string) Request { return Request{Table: "tasks", Op: op, Key: key} }

func (l leasing) Floors(ctx context.Context, key string) (map[int8]uuid.UUID, error) {
	var floors map[int8]uuid.UUID
	q := query{req: l.req("Leasing.Floors", key), t: l.c.tasks, pk: key, slices: []slice{point(lockCK)},
		limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, l.client, q, func(s *state, r *row) map[int8]uuid.UUID {
		var m map[int8]uuid.UUID
		for _, e := range r.entries(colFloors, s.sec) {
			if m == nil {
				m = map[int8]uuid.UUID{}
			}
			m[int8(e.k)] = e.v.(uuid.UUID)
		}
		return m
	}, func(m map[int8]uuid.UUID) bool { floors = m; return true })
	if err != nil {
		return nil, err
	}
	return floors, nil
}

func (l leasing) IDs(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]store.RowRef, error) {
	var refs []store.RowRef
	q := query{req: l.req("Leasing.IDs", key), t: l.c.tasks, pk: key,
		slices: prioSlices(kindTask, prios, from, to), limit: limit, pageSize: defaultPageSize}
	err := read(ctx, l.client, q, func(_ *state, r *row) store.RowRef {
		return store.RowRef{Priority: r.key[1].(int8), ID: r.key[2].(uuid.UUID)}
	}, func(ref store.RowRef) bool { refs = append(refs, ref); return true })
	return refs, err
}

func (l leasing) Rows(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit, pageRows, maxBytes int) ([]taskrow.Row, bool, error) {
	var rows []taskrow.Row
	cut, bytes := false, 0
	q := query{req: l.req("Leasing.Rows/page", key), t: l.c.tasks, pk: key,
		slices: prioSlices(kindTask, prios, from, to), limit: limit, pageSize: pageRows}
	err := read(ctx, l.client, q, func(s *state, r *row) taskrow.Row { return taskRow(key, r, s.sec) }, func(r taskrow.Row) bool {
		rows = append(rows, r)
		bytes += len(r.Payload)
		cut = bytes >= maxBytes
		return !cut
	})
	return rows, cut, err
}

// plainBatches sends rows in taskrow.Group's batches, one request each, applying op to
// each row at the batch's stamp (stamp 0: the client's).
func (l leasing) plainBatches(ctx context.Context, name string, rows []taskrow.Row, stamp int64, build func(taskrow.Row) (op, error)) error {
	batches := taskrow.Group(rows)
	return each(len(batches), func(i int) error {
		key := rows[batches[i][0]].Key
		ts := stamp
		if ts == 0 {
			ts = l.clientStamp()
		}
		return l.exec(ctx, Request{Table: "tasks", Op: name, Key: key, Write: true}, func(s *state) error {
			ops := make([]op, len(batches[i]))
			for j, idx := range batches[i] {
				var err error
				if ops[j], err = build(rows[idx]); err != nil {
					return err
				}
			}
			for _, o := range ops {
				s.apply(s.c.tasks, key, o, ts)
			}
			return nil
		})
	})
}

func (l leasing) WriteMarkers(ctx context.Context, rows []taskrow.Row, ts int64, _ int) error {
	return l.plainBatches(ctx, "Leasing.WriteMarkers", rows, ts, insertOp)
}

func (l leasing) DropMarkers(ctx context.Context, rows []taskrow.Row, ts int64, _ int) error {
	return l.plainBatches(ctx, "Leasing.DropMarkers", rows, ts, deleteOp)
}

func (l leasing) Swap(ctx context.Context, lk store.LockRef, bucket int64, floors map[int8]uuid.UUID, rows []taskrow.Row) (bool, error) {
	check := func(s *state) bool {
		if !s.holds(lk) {
			return false
		}
		for _, r := range rows {
			if r.Attempt > 0 && !s.exists(r) {
				return false
			}
		}
		return true
	}
	build := func() ([]op, error) {
		adds := make([]add, 0, len(floors))
		for p, id := range floors {
			if err := checkUUIDs(id); err != nil {
				return nil, err
			}
			adds = append(adds, add{colFloors, int64(p), id})
		}
		ops, err := releaseOps(lk, []set{{colFloorBucket, bucket}}, adds...)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			o, err := deleteOp(r)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o)
		}
		return ops, nil
	}
	return tasks(l).cas(ctx, "Leasing.Swap", lk.Key, check, build)
}

func (l leasing) DeleteMarker(ctx context.Context, marker taskrow.Row) (bool, error) {
	return tasks(l).cas(ctx, "Leasing.DeleteMarker", marker.Key, func(s *state) bool { return s.exists(marker) },
		func() ([]op, error) { o, err := deleteOp(marker); return []op{o}, err })
}

func (l leasing) DeleteMarkers(ctx context.Context, markers []taskrow.Row) (bool, error) {
	if len(markers) == 0 {
		return false, nil
	}
	check := func(s *state) bool {
		for _, m := range markers {
			if !s.exists(m) {
				return false
			}
		}
		return true
	}
	build := func() ([]op, error) {
		ops := make([]op, len(markers))
		for i, m := range markers {
			var err error
			if ops[i], err = deleteOp(m); err != nil {
				return nil, err
			}
		}
		return ops, nil
	}
	return tasks(l).cas(ctx, "Leasing.DeleteMarkers", markers[0].Key, check, build)
}

func (l leasing) ReplaceMarker(ctx context.Context, from, to taskrow.Row) (bool, error) {
	return tasks(l).cas(ctx, "Leasing.ReplaceMarker", from.Key, func(s *state) bool { return s.exists(from) }, func() ([]op, error) {
		del, err := deleteOp(from)
		if err != nil {
			return nil, err
		}
		ins, err := insertOp(to)
		return []op{del, ins}, err
	})
}

func (l leasing) MarkersThere(ctx context.Context, markers []taskrow.Row) (map[uuid.UUID]bool, error) {
	there := map[uuid.UUID]bool{}
	if len(markers) == 0 {
		return there, nil
	}
	sls := make([]slice, len(markers))
	for i, m := range markers {
		sls[i] = point(rowCK(m))
	}
	q := query{req: Request{Table: "tasks", Op: "Leasing.MarkersThere", Key: markers[0].Key, Serial: true}, t: l.c.tasks,
		pk: markers[0].Key, slices: sls, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, l.client, q, func(_ *state, r *row) uuid.UUID { return r.key[2].(uuid.UUID) },
		func(id uuid.UUID) bool { there[id] = true; return true })
	return there, err
}
