// Package drivertest checks that an adapter of driver.Session behaves as the store
// expects, against a real Cassandra. The store is written once for every driver, so each
// adapter must bind and scan the same Go types, page, report lightweight transactions
// and classify errors alike; Run is the one list of those expectations that every
// adapter's tests run.
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
)

// Run runs the suite on the session open returns, which must be bound to a fresh
// keyspace of the test's own: each subtest creates its tables there.
func Run(t *testing.T, open func(t *testing.T) driver.Session) {
	s := open(t)
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s driver.Session)
	}{
		{"Values", values},
		{"NullableUUIDs", nullableUUIDs},
		{"NotFound", notFound},
		{"MapScan", mapScan},
		{"Paging", paging},
		{"ExecCAS", execCAS},
		{"ExecBatchCAS", execBatchCAS},
		{"ExecBatch", execBatch},
		{"CoordinatorTime", coordinatorTime},
		{"Serial", serial},
		{"Refused", refused},
		{"Cancelled", cancelled},
		{"Node", node},
		{"Keyspace", keyspace},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

// timeout bounds each subtest's requests: schema changes on a busy node take seconds.
const timeout = 2 * time.Minute

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// table creates a table of columns, named after the test and unique, and returns its
// name once every node agrees on the schema.
func table(t *testing.T, s driver.Session, columns string) string {
	t.Helper()
	base := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(base) > 32 {
		base = base[len(base)-32:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t_" + strings.TrimLeft(base, "_") + "_" + hex.EncodeToString(b[:])
	ctx := ctxOf(t)
	require.NoError(t, s.Exec(ctx, driver.Statement{CQL: "CREATE TABLE IF NOT EXISTS " + name + " " + columns, Mode: driver.Once}))
	require.NoError(t, s.AwaitSchemaAgreement(ctx))
	return name
}

func exec(t *testing.T, s driver.Session, cql string, args ...any) {
	t.Helper()
	require.NoError(t, s.Exec(ctxOf(t), driver.Statement{CQL: cql, Args: args}))
}

// timeUUID returns a new version 1 UUID, which a timeuuid column takes.
func timeUUID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewUUID()
	require.NoError(t, err)
	return id
}

// values binds each type the store writes and scans it back.
func values(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, i int, b bigint, ti tinyint, flag boolean, at timestamp,
		data blob, id timeuuid, ids list<timeuuid>, tiny map<tinyint, timeuuid>, wide map<int, timeuuid>)`)
	at := time.Now().UTC().Truncate(time.Millisecond)
	id, id2, id3 := timeUUID(t), timeUUID(t), timeUUID(t)
	ids := []uuid.UUID{id, id2}
	tiny := map[int8]uuid.UUID{-3: id, 7: id2}
	wide := map[int]uuid.UUID{1 << 20: id3}
	exec(t, s, `INSERT INTO `+tb+` (k, i, b, ti, flag, at, data, id, ids, tiny, wide) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		"a", 7, int64(1)<<40, int8(-5), true, at, []byte{1, 2, 3}, id, ids, tiny, wide)

	var (
		i       int
		b       int64
		ti      int8
		flag    bool
		gotAt   time.Time
		data    []byte
		gotID   uuid.UUID
		gotIDs  []uuid.UUID
		gotTiny map[int8]uuid.UUID
		gotWide map[int]uuid.UUID
	)
	require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{CQL: `SELECT i, b, ti, flag, at, data, id, ids, tiny, wide FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}},
		&i, &b, &ti, &flag, &gotAt, &data, &gotID, &gotIDs, &gotTiny, &gotWide))
	require.Equal(t, 7, i)
	require.Equal(t, int64(1)<<40, b)
	require.Equal(t, int8(-5), ti)
	require.True(t, flag)
	require.True(t, at.Equal(gotAt), "timestamp: wrote %v, read %v", at, gotAt)
	require.Equal(t, []byte{1, 2, 3}, data)
	require.Equal(t, id, gotID)
	require.Equal(t, ids, gotIDs)
	require.Equal(t, tiny, gotTiny)
	require.Equal(t, wide, gotWide)

	// A timeuuid bound as uuid.UUID selects the row, as a key or in a condition.
	var k string
	exec(t, s, `INSERT INTO `+tb+` (k, id) VALUES (?, ?)`, "b", id2)
	require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{CQL: `SELECT k FROM ` + tb + ` WHERE k = ? AND id = ? ALLOW FILTERING`, Args: []any{"b", id2}}, &k))
	require.Equal(t, "b", k)
}

// nullableUUIDs binds and scans a timeuuid that may be null through pointers.
func nullableUUIDs(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, opt timeuuid, ids list<timeuuid>, tiny map<tinyint, timeuuid>, wide map<int, timeuuid>)`)
	id := timeUUID(t)
	exec(t, s, `INSERT INTO `+tb+` (k, opt) VALUES (?, ?)`, "set", &id)
	exec(t, s, `INSERT INTO `+tb+` (k, opt) VALUES (?, ?)`, "null", (*uuid.UUID)(nil))
	read := func(k string, dest ...any) {
		t.Helper()
		require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{CQL: `SELECT opt, ids, tiny, wide FROM ` + tb + ` WHERE k = ?`, Args: []any{k}}, dest...))
	}

	var ptr *uuid.UUID
	var ids []uuid.UUID
	var tiny map[int8]uuid.UUID
	var wide map[int]uuid.UUID
	read("set", &ptr, &ids, &tiny, &wide)
	require.NotNil(t, ptr)
	require.Equal(t, id, *ptr)

	ptr = &uuid.UUID{1}
	ids, tiny, wide = []uuid.UUID{id}, map[int8]uuid.UUID{1: id}, map[int]uuid.UUID{1: id}
	read("null", &ptr, &ids, &tiny, &wide)
	require.Nil(t, ptr, "a null timeuuid scanned into a **uuid.UUID")
	require.Empty(t, ids, "a null list")
	require.Empty(t, tiny, "a null map")
	require.Empty(t, wide, "a null map")

	plain := id
	read("null", &plain, &ids, &tiny, &wide)
	require.Equal(t, uuid.UUID{}, plain, "a null timeuuid scanned into a *uuid.UUID")
}

// notFound reads a row that is not there.
func notFound(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int)`)
	st := driver.Statement{CQL: `SELECT v FROM ` + tb + ` WHERE k = ?`, Args: []any{"absent"}}
	var v int
	require.ErrorIs(t, driver.Scan(ctxOf(t), s, st, &v), driver.ErrNotFound)
	require.ErrorIs(t, driver.MapScan(ctxOf(t), s, st, map[string]any{}), driver.ErrNotFound)

	exec(t, s, `INSERT INTO `+tb+` (k, v) VALUES (?, ?)`, "absent", 3)
	require.NoError(t, driver.Scan(ctxOf(t), s, st, &v))
	require.Equal(t, 3, v)
}

// mapScan reads rows by column name: a timeuuid comes as uuid.UUID, and maps of them as
// maps of uuid.UUID, as the store reads a lightweight transaction's row.
func mapScan(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text, c int, v int, id timeuuid, tiny map<tinyint, timeuuid>, wide map<int, timeuuid>, PRIMARY KEY (k, c))`)
	id, id2 := timeUUID(t), timeUUID(t)
	exec(t, s, `INSERT INTO `+tb+` (k, c, v, id, tiny, wide) VALUES (?, ?, ?, ?, ?, ?)`,
		"a", 1, 7, id, map[int8]uuid.UUID{2: id2}, map[int]uuid.UUID{3: id})
	exec(t, s, `INSERT INTO `+tb+` (k, c, v, id) VALUES (?, ?, ?, ?)`, "a", 2, 8, id2)

	row := map[string]any{}
	require.NoError(t, driver.MapScan(ctxOf(t), s, driver.Statement{CQL: `SELECT * FROM ` + tb + ` WHERE k = ? AND c = ?`, Args: []any{"a", 1}}, row))
	require.Equal(t, 7, row["v"])
	require.Equal(t, id, row["id"])
	require.Equal(t, map[int8]uuid.UUID{2: id2}, row["tiny"])
	require.Equal(t, map[int]uuid.UUID{3: id}, row["wide"])

	// Null columns come as the zero values of their types, which the store's type
	// assertions take.
	exec(t, s, `INSERT INTO `+tb+` (k, c) VALUES (?, ?)`, "b", 1)
	row = map[string]any{}
	require.NoError(t, driver.MapScan(ctxOf(t), s, driver.Statement{CQL: `SELECT * FROM ` + tb + ` WHERE k = ? AND c = ?`, Args: []any{"b", 1}}, row))
	require.Equal(t, 0, row["v"])
	require.Equal(t, uuid.UUID{}, row["id"])
	require.IsType(t, map[int8]uuid.UUID(nil), row["tiny"])
	require.Empty(t, row["tiny"])
	require.IsType(t, map[int]uuid.UUID(nil), row["wide"])
	require.Empty(t, row["wide"])

	iter := s.Iter(ctxOf(t), driver.Statement{CQL: `SELECT c, id FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}})
	var got []uuid.UUID
	for m := map[string]any{}; iter.MapScan(m); m = map[string]any{} {
		require.IsType(t, uuid.UUID{}, m["id"])
		got = append(got, m["id"].(uuid.UUID))
	}
	require.NoError(t, iter.Close())
	require.Equal(t, []uuid.UUID{id, id2}, got)
}

// paging reads five rows two at a time. A read reads on into the following pages as
// its rows are scanned (Count reads a day of dead letters so); one of OnePage reads its
// page alone, the first or the one its PageState names, so a page sent again after a
// timeout never hands a row twice.
func paging(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text, c int, PRIMARY KEY (k, c))`)
	for c := range 5 {
		exec(t, s, `INSERT INTO `+tb+` (k, c) VALUES (?, ?)`, "a", c)
	}
	st := driver.Statement{CQL: `SELECT c FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}, PageSize: 2}

	iter := s.Iter(ctxOf(t), st)
	var all []int
	for c := 0; iter.Scan(&c); {
		all = append(all, c)
	}
	require.NoError(t, iter.Close())
	require.Equal(t, []int{0, 1, 2, 3, 4}, all, "an unresumed read goes on through every page")

	// The first page: its rows only, then where the next begins.
	st.OnePage = true
	iter = s.Iter(ctxOf(t), st)
	var got []int
	for c := 0; iter.Scan(&c); {
		got = append(got, c)
	}
	require.Len(t, got, st.PageSize, "the first page alone")
	state := iter.PageState()
	require.NoError(t, iter.Close())
	require.NotEmpty(t, state, "more pages follow the first")
	pages := 1
	for len(state) > 0 {
		require.Less(t, pages, 5, "too many pages")
		st.PageState = state
		iter := s.Iter(ctxOf(t), st)
		n := 0
		for c := 0; iter.Scan(&c); n++ {
			got = append(got, c)
		}
		state = iter.PageState()
		require.NoError(t, iter.Close())
		require.LessOrEqual(t, n, st.PageSize, "a resumed read reads its page alone")
		pages++
	}
	require.Equal(t, []int{0, 1, 2, 3, 4}, got, "every row once, in order")
	require.Equal(t, 3, pages)
}

// execCAS runs lightweight transactions that apply and that do not.
func execCAS(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int, id timeuuid)`)
	id, id2 := timeUUID(t), timeUUID(t)
	insert := `INSERT INTO ` + tb + ` (k, v, id) VALUES (?, ?, ?) IF NOT EXISTS`

	row := map[string]any{}
	applied, err := s.ExecCAS(ctxOf(t), driver.Statement{CQL: insert, Args: []any{"a", 1, id}}, row)
	require.NoError(t, err)
	require.True(t, applied)

	row = map[string]any{}
	applied, err = s.ExecCAS(ctxOf(t), driver.Statement{CQL: insert, Args: []any{"a", 2, id2}}, row)
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, 1, row["v"], "the row's current values")
	require.Equal(t, id, row["id"])
	require.NotContains(t, row, "[applied]")

	update := `UPDATE ` + tb + ` SET v = ?, id = ? WHERE k = ? IF v = ? AND id = ?`
	row = map[string]any{}
	applied, err = s.ExecCAS(ctxOf(t), driver.Statement{CQL: update, Args: []any{3, id2, "a", 9, id}}, row)
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, 1, row["v"], "the values the condition read")
	require.Equal(t, id, row["id"])

	// A condition on a row that is not there reads no values.
	row = map[string]any{}
	applied, err = s.ExecCAS(ctxOf(t), driver.Statement{CQL: update, Args: []any{3, id2, "absent", 1, id}}, row)
	require.NoError(t, err)
	require.False(t, applied)
	require.Empty(t, row)

	// Mode is Once whatever the statement says, and row may be nil.
	applied, err = s.ExecCAS(ctxOf(t), driver.Statement{CQL: update, Args: []any{3, id2, "a", 1, id}, Mode: driver.Plain}, nil)
	require.NoError(t, err)
	require.True(t, applied)

	var v int
	var got uuid.UUID
	require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{CQL: `SELECT v, id FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}, Mode: driver.Serial}, &v, &got))
	require.Equal(t, 3, v)
	require.Equal(t, id2, got)
}

// execBatchCAS runs logged conditional batches that apply and that do not.
func execBatchCAS(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text, c int, v int, id timeuuid, PRIMARY KEY (k, c))`)
	id, id2 := timeUUID(t), timeUUID(t)

	b := &driver.Batch{Logged: true}
	b.Add(`INSERT INTO `+tb+` (k, c, v, id) VALUES (?, ?, ?, ?) IF NOT EXISTS`, "a", 1, 1, id)
	b.Add(`INSERT INTO `+tb+` (k, c, v, id) VALUES (?, ?, ?, ?) IF NOT EXISTS`, "a", 2, 2, id2)
	row := map[string]any{}
	applied, err := s.ExecBatchCAS(ctxOf(t), b, row)
	require.NoError(t, err)
	require.True(t, applied)

	b = &driver.Batch{Logged: true}
	b.Add(`UPDATE `+tb+` SET v = 10 WHERE k = ? AND c = ? IF v = ?`, "a", 1, 7)
	b.Add(`UPDATE `+tb+` SET v = 20 WHERE k = ? AND c = ? IF id = ?`, "a", 2, id2)
	row = map[string]any{}
	applied, err = s.ExecBatchCAS(ctxOf(t), b, row)
	require.NoError(t, err, "a batch that did not apply is no error")
	require.False(t, applied)
	require.Equal(t, 1, row["v"], "the first row's current values")
	require.Equal(t, 1, row["c"])
	require.Equal(t, id, row["id"])
	require.NotContains(t, row, "[applied]")

	b = &driver.Batch{Logged: true}
	b.Add(`UPDATE `+tb+` SET v = 10 WHERE k = ? AND c = ? IF v = ?`, "a", 1, 1)
	b.Add(`UPDATE `+tb+` SET v = 20 WHERE k = ? AND c = ? IF id = ?`, "a", 2, id2)
	applied, err = s.ExecBatchCAS(ctxOf(t), b, nil)
	require.NoError(t, err)
	require.True(t, applied)

	iter := s.Iter(ctxOf(t), driver.Statement{CQL: `SELECT v FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}, Mode: driver.Serial})
	var vs []int
	for v := 0; iter.Scan(&v); {
		vs = append(vs, v)
	}
	require.NoError(t, iter.Close())
	require.Equal(t, []int{10, 20}, vs)
}

// execBatch runs batches without conditions, unlogged and logged.
func execBatch(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text, c int, id timeuuid, PRIMARY KEY (k, c))`)
	id, id2 := timeUUID(t), timeUUID(t)
	b := &driver.Batch{}
	b.Add(`INSERT INTO `+tb+` (k, c, id) VALUES (?, ?, ?)`, "a", 1, id)
	b.Add(`INSERT INTO `+tb+` (k, c, id) VALUES (?, ?, ?)`, "a", 2, id2)
	require.Equal(t, 2, b.Len())
	require.NoError(t, s.ExecBatch(ctxOf(t), b))

	b = &driver.Batch{Logged: true}
	b.Add(`INSERT INTO `+tb+` (k, c, id) VALUES (?, ?, ?)`, "b", 1, id2)
	b.Add(`DELETE FROM `+tb+` WHERE k = ? AND c = ?`, "a", 2)
	require.NoError(t, s.ExecBatch(ctxOf(t), b))

	for k, want := range map[string][]uuid.UUID{"a": {id}, "b": {id2}} {
		iter := s.Iter(ctxOf(t), driver.Statement{CQL: `SELECT id FROM ` + tb + ` WHERE k = ?`, Args: []any{k}})
		var got []uuid.UUID
		for id := (uuid.UUID{}); iter.Scan(&id); {
			got = append(got, id)
		}
		require.NoError(t, iter.Close())
		require.Equal(t, want, got, "partition %s", k)
	}
}

// coordinatorTime leaves a write's timestamp to its coordinator, which still takes one
// the statement gives.
func coordinatorTime(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int)`)
	writetime := func(k string) time.Time {
		t.Helper()
		var us int64
		require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{CQL: `SELECT WRITETIME(v) FROM ` + tb + ` WHERE k = ?`, Args: []any{k}}, &us))
		return time.UnixMicro(us)
	}
	near := func(at time.Time) {
		t.Helper()
		require.WithinDuration(t, time.Now(), at, time.Minute, "a timestamp of the node's clock")
	}

	require.NoError(t, s.Exec(ctxOf(t), driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v) VALUES (?, ?)`, Args: []any{"a", 1}, CoordinatorTime: true}))
	near(writetime("a"))

	b := &driver.Batch{CoordinatorTime: true}
	b.Add(`INSERT INTO `+tb+` (k, v) VALUES (?, ?)`, "b", 1)
	require.NoError(t, s.ExecBatch(ctxOf(t), b))
	near(writetime("b"))

	const at = 1_234_567_890
	require.NoError(t, s.Exec(ctxOf(t), driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v) VALUES (?, ?) USING TIMESTAMP ?`, Args: []any{"c", 1, int64(at)}, CoordinatorTime: true}))
	require.Equal(t, time.UnixMicro(at), writetime("c"), "USING TIMESTAMP")
}

// serial reads at SERIAL, which sees what a lightweight transaction wrote.
func serial(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int, id timeuuid)`)
	id := timeUUID(t)
	applied, err := s.ExecCAS(ctxOf(t), driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v, id) VALUES (?, ?, ?) IF NOT EXISTS`, Args: []any{"a", 5, id}}, nil)
	require.NoError(t, err)
	require.True(t, applied)

	st := driver.Statement{CQL: `SELECT v, id FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}, Mode: driver.Serial}
	var v int
	var got uuid.UUID
	require.NoError(t, driver.Scan(ctxOf(t), s, st, &v, &got))
	require.Equal(t, 5, v)
	require.Equal(t, id, got)

	row := map[string]any{}
	require.NoError(t, driver.MapScan(ctxOf(t), s, st, row))
	require.Equal(t, id, row["id"])

	st.Args = []any{"absent"}
	require.ErrorIs(t, driver.Scan(ctxOf(t), s, st, &v, &got), driver.ErrNotFound)
}

// refused sends statements a node refuses for what they are, which the store tells from
// failures worth sending again.
func refused(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int)`)
	check := func(err error) {
		t.Helper()
		require.Error(t, err)
		require.True(t, driver.Refused(err), "Refused(%v)", err)
		require.True(t, driver.NotApplied(err), "NotApplied(%v)", err)
		require.False(t, driver.TimedOut(err), "TimedOut(%v)", err)
		require.False(t, driver.Unanswered(err), "Unanswered(%v)", err)
		var e *driver.Error
		require.ErrorAs(t, err, &e)
		require.Contains(t, []int{driver.CodeInvalid, driver.CodeSyntax}, e.Code, "%v", err)
	}
	ctx := ctxOf(t)
	check(s.Exec(ctx, driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, nope) VALUES (?, ?)`, Args: []any{"a", 1}}))
	check(s.Exec(ctx, driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v) VALUS (?, ?)`, Args: []any{"a", 1}, Mode: driver.Once}))
	iter := s.Iter(ctx, driver.Statement{CQL: `SELECT nope FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}})
	var v int
	require.False(t, iter.Scan(&v))
	check(iter.Close())
	check(driver.Scan(ctx, s, driver.Statement{CQL: `SELECT v FROM ` + tb + ` WHERE nope = ?`, Args: []any{"a"}, Mode: driver.Serial}, &v))
	_, err := s.ExecCAS(ctx, driver.Statement{CQL: `UPDATE ` + tb + ` SET v = ? WHERE k = ? IF nope = ?`, Args: []any{1, "a", 1}}, nil)
	check(err)
	b := &driver.Batch{}
	b.Add(`INSERT INTO `+tb+` (k, nope) VALUES (?, ?)`, "a", 1)
	check(s.ExecBatch(ctx, b))
	b = &driver.Batch{Logged: true}
	b.Add(`UPDATE `+tb+` SET v = ? WHERE k = ? IF nope = ?`, 1, "a", 1)
	_, err = s.ExecBatchCAS(ctx, b, nil)
	check(err)
}

// cancelled sends requests on a context already done: the caller's error comes back,
// as errors.Is finds it.
func cancelled(t *testing.T, s driver.Session) {
	tb := table(t, s, `(k text PRIMARY KEY, v int)`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	insert := driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v) VALUES (?, ?)`, Args: []any{"a", 1}}
	read := driver.Statement{CQL: `SELECT v FROM ` + tb + ` WHERE k = ?`, Args: []any{"a"}}
	var v int
	b := &driver.Batch{}
	b.Add(insert.CQL, insert.Args...)
	casBatch := &driver.Batch{Logged: true}
	casBatch.Add(`INSERT INTO `+tb+` (k, v) VALUES (?, ?) IF NOT EXISTS`, "a", 1)
	for name, run := range map[string]func(ctx context.Context) error{
		"Exec": func(ctx context.Context) error { return s.Exec(ctx, insert) },
		"Serial": func(ctx context.Context) error {
			return driver.Scan(ctx, s, driver.Statement{CQL: read.CQL, Args: read.Args, Mode: driver.Serial}, &v)
		},
		"Iter": func(ctx context.Context) error {
			iter := s.Iter(ctx, read)
			iter.Scan(&v)
			return iter.Close()
		},
		"ExecCAS": func(ctx context.Context) error {
			_, err := s.ExecCAS(ctx, driver.Statement{CQL: `INSERT INTO ` + tb + ` (k, v) VALUES (?, ?) IF NOT EXISTS`, Args: []any{"a", 1}}, nil)
			return err
		},
		"ExecBatch": func(ctx context.Context) error { return s.ExecBatch(ctx, b) },
		"ExecBatchCAS": func(ctx context.Context) error {
			_, err := s.ExecBatchCAS(ctx, casBatch, nil)
			return err
		},
	} {
		err := run(ctx)
		require.ErrorIs(t, err, context.Canceled, name)
		require.False(t, driver.Refused(err), name)

		// A deadline already past is a timeout: the request may or may not have run.
		past, stop := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		err = run(past)
		stop()
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.True(t, driver.TimedOut(err), name)
	}
}

// node reads system.local, whose host_id is the node that answered.
func node(t *testing.T, s driver.Session) {
	iter := s.Iter(ctxOf(t), driver.Statement{CQL: `SELECT host_id FROM system.local`})
	var id uuid.UUID
	require.True(t, iter.Scan(&id))
	got := iter.Node()
	require.NoError(t, iter.Close())
	require.NotEmpty(t, got)
	require.Equal(t, id.String(), got)
}

// keyspace finds the tables it creates in the session's keyspace.
func keyspace(t *testing.T, s driver.Session) {
	ks := s.Keyspace()
	require.NotEmpty(t, ks)
	tb := table(t, s, `(k text PRIMARY KEY)`)
	var name string
	require.NoError(t, driver.Scan(ctxOf(t), s, driver.Statement{
		CQL:  `SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
		Args: []any{ks, tb}}, &name))
	require.Equal(t, tb, name)
}
