package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	gocqlv2 "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/gocql/gocql"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// The drivers -driver chooses between: the adapter that runs shardq's part of a workload.
const (
	driverGocql   = "gocql"   // github.com/gocql/gocql v1, through shardqgocql
	driverGocqlV2 = "gocqlv2" // github.com/apache/cassandra-gocql-driver/v2, through shardqgocqlv2
)

// driverEnv hands trickle's and skew's child processes the parent's -driver.
const driverEnv = "SHARDQ_BENCH_DRIVER"

func checkDriver(name string) error {
	if name != driverGocql && name != driverGocqlV2 {
		return fmt.Errorf("-driver %q: want %s or %s", name, driverGocql, driverGocqlV2)
	}
	return nil
}

// libSession says how to open a session for the library. Both drivers get the same
// settings and observers, so that figures taken through either compare.
type libSession struct {
	hosts    []string
	keyspace string
	numConns int           // 0: the driver's default
	requests *counter      // if set, counts every query and batch
	frames   *atomic.Int64 // if set, counts every frame received
}

// openDriver opens a session with the driver named (driverGocql or driverGocqlV2), from
// that adapter's RecommendedCluster as users are told to, and returns the shardq driver on
// it and what closes the session.
func openDriver(name string, ls libSession) (*shardq.Driver, func(), error) {
	switch name {
	case driverGocql:
		c := shardqgocql.RecommendedCluster(gocql.NewCluster(ls.hosts...))
		c.Keyspace = ls.keyspace
		if ls.numConns > 0 {
			c.NumConns = ls.numConns
		}
		if ls.requests != nil {
			c.QueryObserver = *ls.requests
			c.BatchObserver = *ls.requests
		}
		if ls.frames != nil {
			c.FrameHeaderObserver = frameCounter{ls.frames}
		}
		s, err := c.CreateSession()
		if err != nil {
			return nil, nil, err
		}
		return shardqgocql.New(s), s.Close, nil
	case driverGocqlV2:
		c := shardqgocqlv2.RecommendedCluster(gocqlv2.NewCluster(ls.hosts...))
		c.Keyspace = ls.keyspace
		if ls.numConns > 0 {
			c.NumConns = ls.numConns
		}
		if ls.requests != nil {
			c.QueryObserver = counterV2(*ls.requests)
			c.BatchObserver = counterV2(*ls.requests)
		}
		if ls.frames != nil {
			c.FrameHeaderObserver = frameCounterV2{ls.frames}
		}
		s, err := c.CreateSession()
		if err != nil {
			return nil, nil, err
		}
		return shardqgocqlv2.New(s), s.Close, nil
	}
	return nil, nil, checkDriver(name)
}

// counterV2 is counter for v2 sessions: the same counts, kept in the same places.
type counterV2 counter

func (c counterV2) ObserveQuery(_ context.Context, q gocqlv2.ObservedQuery) {
	c.n.Add(1)
	counter(c).kind(kindOf(q.Statement))
}

func (c counterV2) ObserveBatch(_ context.Context, b gocqlv2.ObservedBatch) {
	c.n.Add(1)
	counter(c).kind(batchKind(b.Statements))
}

// batchKind names a batch by the kinds of statement it holds.
func batchKind(stmts []string) string {
	kinds := make([]string, 0, len(stmts))
	for _, s := range stmts {
		if k := kindOf(s); !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	return "BATCH [" + strings.Join(kinds, "; ") + "]"
}

// frameCounterV2 is frameCounter for v2 sessions.
type frameCounterV2 struct{ n *atomic.Int64 }

func (c frameCounterV2) ObserveFrameHeader(context.Context, gocqlv2.ObservedFrameHeader) { c.n.Add(1) }
