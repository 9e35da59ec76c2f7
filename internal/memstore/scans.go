package memstore

import (
	"context"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/taskrow"
)

type scans struct{ *client }

func (g scans) Tally(ctx context.Context, key string, prios []int8, from, to uuid.UUID, pageRows int, fn func(taskrow.Row)) error {
	q := query{req: Request{Table: "tasks", Op: "Scans.Tally/page", Key: key}, t: g.c.tasks, pk: key,
		slices: prioSlices(kindTask, prios, from, to), limit: math.MaxInt, pageSize: pageRows}
	return read(ctx, g.client, q, func(s *state, r *row) taskrow.Row {
		return taskrow.Row{Key: key, Priority: r.key[1].(int8), ID: r.key[2].(uuid.UUID),
			Attempt: int(int32Of(r.value(colAttempt, s.sec))), Retrying: boolOf(r.value(colRetrying, s.sec))}
	}, func(r taskrow.Row) bool { fn(r); return true })
}

func (g scans) Heads(ctx context.Context, key string, prios []int8, from, to uuid.UUID, limit int) ([]taskrow.Row, error) {
	var rows []taskrow.Row
	q := query{req: Request{Table: "tasks", Op: "Scans.Heads", Key: key}, t: g.c.tasks, pk: key,
		slices: prioSlices(kindTask, prios, from, to), limit: limit, pageSize: defaultPageSize}
	err := read(ctx, g.client, q, func(s *state, r *row) taskrow.Row {
		v := func(col int) any { return r.value(col, s.sec) }
		return taskrow.Row{Key: key, Priority: r.key[1].(int8), ID: r.key[2].(uuid.UUID), TaskID: uuidOf(v(colTaskID)),
			DueAt: timeOf(v(colDueAt)), Timeout: time.Duration(int64Of(v(colTimeout))) * time.Millisecond,
			Attempt: int(int32Of(v(colAttempt))), Token: int64Of(v(colDeliveries))}
	}, func(r taskrow.Row) bool { rows = append(rows, r); return true })
	return rows, err
}

func (g scans) TaskIDs(ctx context.Context, key string, pageRows int, fn func(uuid.UUID)) error {
	q := query{req: Request{Table: "tasks", Op: "Scans.TaskIDs/page", Key: key}, t: g.c.tasks, pk: key,
		slices: []slice{{lo: ckInt8(kindTask, false), hi: ckInt8(kindTask+1, false), loIn: true}}, limit: math.MaxInt, pageSize: pageRows}
	return read(ctx, g.client, q, func(s *state, r *row) uuid.UUID { return uuidOf(r.value(colTaskID, s.sec)) },
		func(id uuid.UUID) bool { fn(id); return true })
}
