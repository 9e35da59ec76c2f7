package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/lock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

// execution is one statement execution as the driver picked a host for it.
type execution struct {
	stmt   string
	cons   gocql.Consistency
	serial gocql.SerialConsistency
}

// recordingPolicy passes host selection on and records the consistency and serial
// consistency of every statement execution the driver makes.
type recordingPolicy struct {
	gocql.HostSelectionPolicy
	mu   sync.Mutex
	seen []execution
}

func (p *recordingPolicy) Pick(q gocql.ExecutableQuery) gocql.NextHost {
	e := execution{stmt: fmt.Sprintf("%T", q), cons: q.GetConsistency()}
	switch q := q.(type) {
	case *gocql.Query:
		e.stmt = q.Statement()
	case *gocql.Batch:
		e.stmt = fmt.Sprintf("batch of %d, first: %s", q.Size(), q.Entries[0].Stmt)
	}
	// gocql has no getter for it; both Query and Batch keep it in this field.
	e.serial = gocql.SerialConsistency(reflect.ValueOf(q).Elem().FieldByName("serialCons").Uint())
	p.mu.Lock()
	p.seen = append(p.seen, e)
	p.mu.Unlock()
	return p.HostSelectionPolicy.Pick(q)
}

func (p *recordingPolicy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

// Every statement the library sends is read or written at QUORUM (or SERIAL), and every
// one carries SERIAL as its serial consistency, whatever the session's defaults: a locked
// read at ONE on a cluster with RF > 1 could return rows the previous lock holder already
// swapped away, and deliver them a second time; an LWT at LOCAL_SERIAL decides in one data
// centre only. Each path is exercised: scheduling, keys, lookups, Reschedule, Cancel, the
// consumer's take, extension, retry, dead-lettering and ack, dead letters, series and
// their advance and keeper, and a lock's renewal.
func TestConsistencyPinned(t *testing.T) {
	t.Parallel()
	ks := cassandratest.SchemaKeyspace(t)
	rec := &recordingPolicy{}
	s := cassandratest.SessionFor(t, ks, func(c *gocql.ClusterConfig) {
		rec.HostSelectionPolicy = c.PoolConfig.HostSelectionPolicy
		c.PoolConfig.HostSelectionPolicy = rec
		c.Consistency = gocql.One
		c.SerialConsistency = gocql.LocalSerial
	})
	ctx := context.Background()
	// step runs f and fails the test if it sent nothing: a path this test does not reach.
	step := func(name string, f func()) {
		t.Helper()
		before := rec.count()
		f()
		require.Greater(t, rec.count(), before, "%s sent no statement", name)
	}

	var q shardqtype.QueueConfig
	step("CreateQueue", func() {
		var err error
		q, err = shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "pinned", ShardCount: 2, BucketCount: 10,
			BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
		require.NoError(t, err)
	})
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	step("ScheduleTasks", func() {
		_, err := p.ScheduleTasks(ctx, []producer.Task{{Queue: q.Name}, {Queue: q.Name}, {Queue: q.Name}})
		require.NoError(t, err)
	})
	step("ScheduleTask with a key", func() {
		_, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Key: "k"})
		require.NoError(t, err)
	})
	step("ScheduleTask with a key held", func() {
		_, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, Key: "k"})
		require.ErrorIs(t, err, producer.ErrDuplicate)
	})
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	step("TaskByKey", func() {
		_, err := in.TaskByKey(ctx, q.Name, "k")
		require.NoError(t, err)
	})
	later, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, DueAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	step("Task", func() {
		_, err := in.Task(ctx, later)
		require.NoError(t, err)
	})
	step("Reschedule", func() {
		require.NoError(t, p.Reschedule(ctx, later, producer.RescheduleOptions{DueAt: time.Now().Add(2 * time.Hour)}))
	})
	step("Cancel", func() { require.NoError(t, p.Cancel(ctx, later, producer.CancelOptions{})) })

	c, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name})
	require.NoError(t, err)
	var got []*consumer.Task
	step("AcquireTasks", func() {
		require.Eventually(t, func() bool {
			more, err := c.AcquireTasks(ctx, 4)
			require.NoError(t, err)
			got = append(got, more...)
			return len(got) == 4
		}, 10*time.Second, 20*time.Millisecond)
	})
	step("Extend", func() { require.NoError(t, c.Extend(ctx, got[0], 4*time.Second)) })
	step("Retry", func() { require.NoError(t, c.Retry(ctx, got[0], 9*time.Second)) })
	step("DeadLetter", func() { require.NoError(t, c.DeadLetter(ctx, got[1], errors.New("failed"))) })
	step("AckTasks", func() { require.NoError(t, c.AckTasks(ctx, got[2:]...)) })
	var letters []shardqtype.TaskInfo
	step("DeadLetters", func() {
		letters, err = in.DeadLetters(ctx, q.Name, inspect.DeadLetterQuery{})
		require.NoError(t, err)
		require.Len(t, letters, 1)
	})
	step("ReplayDeadLetter", func() {
		_, err := p.ReplayDeadLetter(ctx, q.Name, letters[0].DeadLetterID)
		require.NoError(t, err)
	})

	sc, err := series.New(cassandratest.Driver(s), series.Config{})
	require.NoError(t, err)
	step("series Create", func() {
		_, err := sc.Create(ctx, series.Series{Queue: q.Name, Name: "each-second", Every: time.Second})
		require.NoError(t, err)
	})
	step("series List", func() {
		_, err := sc.List(ctx, q.Name)
		require.NoError(t, err)
	})
	step("series occurrence acked, and the series advanced", func() {
		var occ []*consumer.Task
		require.Eventually(t, func() bool {
			more, err := c.AcquireTasks(ctx, 10)
			require.NoError(t, err)
			occ = append(occ, more...)
			return len(occ) >= 2 // the occurrence and the replayed dead letter
		}, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, c.AckTasks(ctx, occ...))
		info, err := sc.Get(ctx, q.Name, "each-second")
		require.NoError(t, err)
		require.Equal(t, int64(2), info.Occurrences, "the ack scheduled the next occurrence")
	})
	step("series Keep", func() { require.NoError(t, sc.Keep(ctx, q.Name)) })
	step("series Pause", func() { require.NoError(t, sc.Pause(ctx, q.Name, "each-second")) })
	step("series Resume", func() { require.NoError(t, sc.Resume(ctx, q.Name, "each-second")) })
	step("series Delete", func() { require.NoError(t, sc.Delete(ctx, q.Name, "each-second")) })

	locker, err := lock.New(cassandratest.Driver(s), lock.Config{})
	require.NoError(t, err)
	var lease *lock.Lock
	step("lock Acquire", func() {
		lease, err = locker.Acquire(ctx, "pinned-lock")
		require.NoError(t, err)
	})
	step("lock Renew", func() { require.NoError(t, lease.Renew(ctx)) })
	step("lock Held", func() {
		held, err := lease.Held(ctx)
		require.NoError(t, err)
		require.True(t, held)
	})
	step("lock Release", func() { require.NoError(t, lease.Release(ctx)) })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.seen {
		require.Contains(t, []gocql.Consistency{gocql.Quorum, gocql.Consistency(gocql.Serial)}, e.cons, "%s", e.stmt)
		require.Equal(t, gocql.Serial, e.serial, "serial consistency of %s", e.stmt)
	}
	t.Logf("%d statement executions checked", len(rec.seen))
}
