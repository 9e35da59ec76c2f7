// Package storetest holds the scenarios every store.Store must pass: the real node's
// behaviour, through any driver's adapter, and memstore's imitation of it. A scenario
// asserts what a node does, so a store that disagrees with it is the one to fix.
package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/shard"
)

// Scenario is one case of the suite, run on a store of its own.
type Scenario struct {
	// Name names the scenario's subtest.
	Name string
	run  func(t *testing.T, ctx context.Context, s store.Store)
}

// Timeout bounds one scenario, counted from when its store stands.
const Timeout = 2 * time.Minute

// Scenarios returns every scenario, for a caller that names its subtests itself.
func Scenarios() []Scenario { return slices.Clone(scenarios) }

// Test runs the scenario on the store open returns for t, which must be empty and have
// shardq's schema. The scenario's time starts once the store stands: making a keyspace
// at RF 3 on a loaded machine can take most of a minute by itself.
func (sc Scenario) Test(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	s := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	sc.run(t, ctx, s)
}

// Run runs every scenario as a parallel subtest of t, each on the store open returns.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Test(t, open)
		})
	}
}

// Key is the partition most scenarios write to.
const Key = "q:0:0"

// TaskRow is a task row of Key visible at at, with payload p.
func TaskRow(prio int8, at time.Time, p string) taskrow.Row {
	id := shard.NewID(at)
	return taskrow.Row{Key: Key, Priority: prio, ID: id, TaskID: id, Payload: []byte(p), DueAt: at.UTC().Truncate(time.Millisecond),
		Timeout: time.Second}
}

// Insert returns a plain insert of each row, stamped now.
func Insert(rows ...taskrow.Row) []store.Mutation {
	var muts []store.Mutation
	for _, r := range rows {
		muts = append(muts, store.Mutation{Op: store.Insert, Row: r, Stamp: time.Now().UnixMicro()})
	}
	return muts
}

// Holder returns a new lock holder: a version 1 UUID, as the holder column is a
// timeuuid.
func Holder() uuid.UUID { return uuid.Must(uuid.NewUUID()) }

// The scenarios' own short names.
const key = Key

var (
	taskRow = TaskRow
	insert  = Insert
	holder  = Holder
)

func token(v int64) *int64 { return &v }

// trailingHost is a host clock that trails the real one, which the node keeps, by itself.
type trailingHost time.Duration

func (h trailingHost) Now() time.Time { return time.Now().Add(-time.Duration(h)) }

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		require.True(t, time.Now().Before(deadline), "still not %s", what)
		<-tick.C
	}
}
