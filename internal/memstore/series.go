package memstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/store"
)

// The series table: PRIMARY KEY ((queue, name)), one row per partition; series_names:
// PRIMARY KEY (queue, name).
const (
	colSpec = iota
	colVersion
	colPaused
	colDone
	colSeq
	colOpen
	colSeriesTaskID
	colNominal
	colPriority
	colStamp
	colCatchUp
	colAdvancedAt
	colSeriesCreatedAt
	colWritten
)

type series struct{ *client }

func seriesPK(queue, name string) string { return queue + ":" + name }

func (g series) Get(ctx context.Context, queue, name string, serial bool) (store.SeriesRow, error) {
	pk := seriesPK(queue, name)
	type got struct {
		r               store.SeriesRow
		taskID, written uuid.UUID
		nominal         int64
	}
	var found *got
	q := query{req: Request{Table: "series", Op: "Series.Get", Key: pk, Serial: serial}, t: g.c.series, pk: pk,
		slices: []slice{whole}, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, g.client, q, func(s *state, r *row) got {
		v := func(col int) any { return r.value(col, s.sec) }
		return got{r: store.SeriesRow{Queue: queue, Name: name, Spec: stringOf(v(colSpec)), Version: int64Of(v(colVersion)),
			Paused: boolOf(v(colPaused)), Done: boolOf(v(colDone)), Seq: int64Of(v(colSeq)), Open: boolOf(v(colOpen)),
			Priority: int8Of(v(colPriority)), Stamp: int64Of(v(colStamp)), CatchUp: boolOf(v(colCatchUp)),
			AdvancedAt: timeOf(v(colAdvancedAt)), CreatedAt: timeOf(v(colSeriesCreatedAt))},
			taskID: uuidOf(v(colSeriesTaskID)), written: uuidOf(v(colWritten)), nominal: int64Of(v(colNominal))}
	}, func(v got) bool { found = &v; return true })
	r := store.SeriesRow{Queue: queue, Name: name}
	switch {
	case err != nil:
		return r, err
	case found == nil || found.r.Version == 0:
		// A row with no version holds only a Written cell that outlived a delete.
		if found != nil {
			r = found.r
		}
		return r, fmt.Errorf("%w: series %s in queue %s", store.ErrNotFound, name, queue)
	}
	r = found.r
	r.TaskID, r.Written = found.taskID, found.written
	if found.nominal != 0 {
		r.Nominal = time.Unix(0, found.nominal)
	}
	return r, nil
}

// NamesOf lists each queue's series as Names does: the gate sees a request per queue,
// where Cassandra serves one.
func (g series) NamesOf(ctx context.Context, queues []string) (map[string][]string, error) {
	out := make(map[string][]string, len(queues))
	for _, q := range queues {
		names, err := g.Names(ctx, q)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			out[q] = names
		}
	}
	return out, nil
}

func (g series) Names(ctx context.Context, queue string) ([]string, error) {
	var names []string
	q := query{req: Request{Table: "series_names", Op: "Series.Names", Key: queue}, t: g.c.names, pk: queue,
		slices: []slice{whole}, limit: math.MaxInt, pageSize: defaultPageSize}
	err := read(ctx, g.client, q, func(_ *state, r *row) string { return r.key[0].(string) },
		func(name string) bool { names = append(names, name); return true })
	if err != nil {
		return nil, err
	}
	return names, nil
}

// plain writes o to partition pk of t at write timestamp stamp; ids are the timeuuids it
// binds.
func (g series) plain(ctx context.Context, t *table, opName, pk string, o op, stamp int64, ids ...uuid.UUID) error {
	return g.exec(ctx, Request{Table: t.name, Op: opName, Key: pk, Write: true}, func(s *state) error {
		if err := checkUUIDs(ids...); err != nil {
			return err
		}
		s.apply(t, pk, o, stamp)
		return nil
	})
}

func (g series) AddName(ctx context.Context, queue, name string, stamp int64) error {
	return g.plain(ctx, g.c.names, "Series.AddName", queue, op{ck: name, key: []any{name}, insert: true}, stamp)
}

func (g series) DeleteName(ctx context.Context, queue, name string, stamp int64) error {
	return g.plain(ctx, g.c.names, "Series.DeleteName", queue, op{ck: name, key: []any{name}, delete: true}, stamp)
}

// cas runs a conditional write on a series' row, if its version is want (nil: null).
func (g series) cas(ctx context.Context, opName, queue, name string, want any, o op, check ...uuid.UUID) (bool, error) {
	pk := seriesPK(queue, name)
	applied := false
	err := g.exec(ctx, Request{Table: "series", Op: opName, Key: pk, Write: true, Conditional: true}, func(s *state) error {
		if err := checkUUIDs(check...); err != nil {
			return err
		}
		ballot := s.serverStamp()
		if applied = equal(s.get(s.c.series, pk, "").value(colVersion, s.sec), want); applied {
			s.apply(s.c.series, pk, o, ballot)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

func (g series) Put(ctx context.Context, r store.SeriesRow, from int64) (bool, error) {
	var nominal int64
	if !r.Nominal.IsZero() {
		nominal = r.Nominal.UnixNano()
	}
	o := op{sets: []set{{colSpec, r.Spec}, {colVersion, r.Version}, {colPaused, r.Paused}, {colDone, r.Done}, {colSeq, r.Seq},
		{colOpen, r.Open}, {colSeriesTaskID, r.TaskID}, {colNominal, nominal}, {colPriority, r.Priority},
		{colStamp, r.Stamp}, {colCatchUp, r.CatchUp}, {colAdvancedAt, timestamp(r.AdvancedAt)},
		{colSeriesCreatedAt, timestamp(r.CreatedAt)}}}
	var want any // IF version = null
	if from != 0 {
		want = from
	}
	return g.cas(ctx, "Series.Put", r.Queue, r.Name, want, o, r.TaskID)
}

func (g series) Delete(ctx context.Context, queue, name string, version int64) (bool, error) {
	return g.cas(ctx, "Series.Delete", queue, name, version, op{delete: true})
}

func (g series) MarkWritten(ctx context.Context, queue, name string, id uuid.UUID, stamp int64) error {
	return g.plain(ctx, g.c.series, "Series.MarkWritten", seriesPK(queue, name), op{sets: []set{{colWritten, id}}},
		stamp, id)
}
