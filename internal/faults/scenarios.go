//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shardqtype"
)

// rate is how many tasks a second come due in the tests that fault nodes.
const rate = 100

// NodeFrozen freezes one node (SIGSTOP) for 15 s a quarter into a drain, then resumes
// it: it keeps its connections open and answers nothing, the hardest failure for a client
// to see. The partitions keep a quorum of the other two, and delivery goes on: the tasks
// due during the freeze (about 1,500) start within 5 s (p99), every task is acked, none
// runs twice. It runs first in its binary: a node another test restarted runs a cold JVM
// for a minute or so, and on two cores shared by three nodes that alone took this test's
// p99 from 0.7-0.8 s to 2.2 s.
func NodeFrozen(t *testing.T, a Adapter) {
	c := newCluster(t)
	var frozeAt, thawedAt time.Time
	e := drainThrough(t, a, c, 3, func() {
		c.signal(3, syscall.SIGSTOP)
		frozeAt = time.Now()
		time.Sleep(15 * time.Second) // the fault itself
		c.signal(3, syscall.SIGCONT)
		thawedAt = time.Now()
	})
	rep := e.report("node-frozen")
	p50, p99, maxMs, due := e.rec.lateness(frozeAt, thawedAt)
	rep.Extra["frozen_s"] = thawedAt.Sub(frozeAt).Seconds()
	rep.Extra["frozen_tasks"] = due
	rep.Extra["frozen_lateness_p50_ms"] = p50
	rep.Extra["frozen_lateness_p99_ms"] = p99
	rep.Extra["frozen_lateness_max_ms"] = maxMs
	logTimeline(t, e.rec, frozeAt.Add(-3*time.Second), thawedAt.Add(5*time.Second))
	finish(t, rep)
	// A quarter into 40 s of tasks, a 15 s freeze has 15 s of them due within it; 10 s
	// worth leaves room for a late start, and none would make the p99 below say nothing.
	require.GreaterOrEqual(t, due, 10*rate, "tasks due during the freeze")
	// This p99 was 0.7-2.2 s in the runs docs/operations.md reports and 1.0-3.5 s in four runs on the 2-core
	// box loaded by other work (load average near 20), where the tasks due outside the
	// freeze ran as late: its spikes sit where the freeze starts (requests the node holds
	// wait out their timeout and are settled) and where it ends (the node answers its
	// backlog). Without hostpolicy's routing the partitions the frozen node leads wait out
	// the freeze: p99 17.5 s. 5 s stands clear of both.
	require.LessOrEqual(t, p99, 5000.0, "lateness p99 of the tasks due during the freeze, ms")
}

// NodeKilled SIGKILLs one node a quarter into a drain (3 worker processes, 100 tasks/s due
// over 40 s, written as they come due), and the node stays down: its replicas'
// partitions keep a quorum, every task is acked, none runs twice.
func NodeKilled(t *testing.T, a Adapter) {
	c := newCluster(t)
	var killedAt time.Time
	e := drainThrough(t, a, c, 2, func() {
		c.kill(2)
		killedAt = time.Now()
	})
	rep := e.report("node-killed")
	after := e.rec.dueWithin(killedAt, time.Now())
	rep.Extra["due_after_kill"] = after
	finish(t, rep)
	require.GreaterOrEqual(t, after, 40*rate/2, "tasks due after the kill (a quarter into 40 s of them)")
}

// drainThrough runs three worker processes over 40 s of tasks due at rate, written as
// they come due (env.scheduleAsDue), calls fault a quarter into the drain, and returns
// once every task was acked; node is restored at the end of the test.
func drainThrough(t *testing.T, a Adapter, c *cluster, node int, fault func()) *env {
	e := newEnv(t, a, shardqtype.QueueConfig{})
	c.restoreAtEnd(node)
	for range 3 {
		e.startWorker()
	}
	const n = 40 * rate
	last, written := e.scheduleAsDue(n, time.Now().Add(3*time.Second), n*time.Second/rate)
	e.waitStarted(n/4, time.Minute)
	fault()
	written()
	e.waitStarted(n, time.Until(last)+time.Minute)
	e.settle(time.Minute, nil)
	e.stopWorkers()
	return e
}

// WorkersKilled SIGKILLs worker processes at random, one every 1 to 4 s, and replaces each at
// once, while 100 tasks/s come due for 60 s, written as they come due. The tasks a killed worker held (leased ahead,
// or in a handler) come back when their 5 s timeout ends: those whose handler had started
// may run twice, and so may those a killed worker had written timeout markers for but not
// yet swapped (a live worker takes them meanwhile, and the markers deliver them again);
// no other runs twice, and every task is acked.
func WorkersKilled(t *testing.T, a Adapter) {
	newCluster(t)
	e := newEnv(t, a, shardqtype.QueueConfig{DefaultTimeout: 5 * time.Second})
	for range 3 {
		e.startWorker()
	}
	const n = 60 * rate
	last, written := e.scheduleAsDue(n, time.Now().Add(3*time.Second), n*time.Second/rate)
	kills := 0
	for time.Now().Before(last) {
		time.Sleep(time.Second + rand.N(3*time.Second)) // the faults' own schedule
		e.killWorker(e.anyWorker())
		kills++
		e.startWorker()
	}
	written()
	e.waitStarted(n, time.Minute)
	e.settle(time.Minute, nil)
	e.stopWorkers()
	rep := e.report("workers-killed")
	rep.Extra["workers_killed"] = kills
	finish(t, rep)
	require.Positive(t, rep.Redelivered, "tasks a killed worker held, delivered again")
}

// gcGrace is the tasks table's gc_grace_seconds in TestNodeRestarted: compaction purges
// deletes older than this, and hints older than this are not delivered.
const gcGrace = 10 * time.Second

// NodeRestarted stops one node, its data kept, while 1,000 tasks it holds are drained
// (their rows deleted), and keeps it down longer than the tasks table's gc_grace_seconds (lowered to
// 10 s): the other two purge those deletes, and the hints that would bring them to it
// expire. It is restarted while 2,000 more tasks come due at 50/s, written as they come
// due, and the rows it still
// holds come back: rows_back counts them, read from every replica at the end. They lie
// below the read floors the consumers raised past them while draining, so none is read
// again (returners: tasks of the first 1,000 started after the restart: none). A consumer
// that read such a partition from below them would deliver them a second time. Repairing
// a node that was down longer than max_hint_window within gc_grace_seconds prevents them
// (docs/operations.md, Running on a cluster). No task may run twice: the test's gc_grace goes back to 600 s before node 3
// returns (see there why).
func NodeRestarted(t *testing.T, a Adapter) {
	c := newCluster(t)
	const lap = 75 * time.Second
	e := newEnv(t, a, shardqtype.QueueConfig{BucketCount: 75, BucketDuration: time.Second, DefaultTimeout: 10 * time.Second})
	c.restoreAtEnd(3)
	require.NoError(t, e.session.Query(fmt.Sprintf(`ALTER TABLE tasks WITH gc_grace_seconds = %d`,
		int(gcGrace.Seconds()))).Exec())
	for range 3 {
		e.startWorker()
	}

	const nA = 10 * rate
	idsA, lastA := e.schedule(nA, time.Now().Add(15*time.Second), nA*time.Second/rate)
	c.stop(3)
	e.waitStarted(nA, time.Until(lastA)+time.Minute)
	e.waitDone(nA, time.Minute)
	deleted := e.waitDrained(time.Minute, nil)
	time.Sleep(time.Until(deleted.Add(gcGrace + 2*time.Second))) // the fault: down past gc_grace
	for _, node := range []int{1, 2} {
		c.nodetool(node, "flush", e.ks, "tasks")
		c.nodetool(node, "compact", e.ks, "tasks")
	}
	// The purge done, gc_grace goes back to the schema's before node 3 returns. A node
	// coming back takes requests from when gossip sees it up, up to 20 s before restart
	// returns, on a cold JVM replaying hints, and drops requests it answers too late (300
	// Paxos commits and mutations per 5 s were seen). The acks' commits it drops are hinted,
	// but Cassandra replays a hint only within gc_grace_seconds of its creation, and reads
	// stop returning tombstones older than that: with 10 s, markers it got and whose acks it
	// missed were live again on it, and quorum reads that asked it delivered up to 37 tasks
	// twice. With 600 s its hints land, so every duplicate here counts.
	require.NoError(t, e.session.Query(`ALTER TABLE tasks WITH gc_grace_seconds = 600`).Exec())

	const nB, rateB = 2000, rate / 2
	lastB, writtenB := e.scheduleAsDue(nB, time.Now().Add(5*time.Second), nB*time.Second/rateB)
	c.restart(3)
	back := time.Now()
	idsB := writtenB()
	e.waitStarted(nA+nB, time.Until(lastB)+time.Minute)
	e.settle(time.Minute, idsB) // the rows of set A that came back stay: they are the fault
	// Idle workers read every partition at least once per 15 s (1.5 MaxIdleInterval).
	time.Sleep(time.Until(lastA.Add(lap + 20*time.Second))) // the ring's lap back to set A
	e.stopWorkers()

	rep := e.report("node-restarted")
	returners := e.rec.startedAfter(idsA, back)
	n := 0
	for _, k := range returners {
		n += k
	}
	rep.Extra["gc_grace_s"] = gcGrace.Seconds()
	rep.Extra["down_s"] = back.Sub(deleted).Seconds()
	rep.Extra["returners"] = n
	rep.Extra["returners_by_attempt"] = returners
	rowsBack := e.rowsOf(idsA)
	rep.Extra["rows_back"] = rowsBack
	finish(t, rep)
	require.Positive(t, rowsBack, "deleted rows the restarted node brought back: none means the fault was not reproduced")
	require.Zero(t, n, "tasks of the first set started again after the restart: %v by attempt", returners)
}

// rowsOf counts the rows of tasks ids in the tasks table, read from every replica (ALL):
// rows deleted while a replica was down that it brought back.
func (e *env) rowsOf(ids []uuid.UUID) int {
	e.t.Helper()
	want := map[gocql.UUID]bool{}
	for _, id := range ids {
		want[gocql.UUID(id)] = true
	}
	iter := e.session.Query(`SELECT task_id FROM tasks WHERE kind = 1 ALLOW FILTERING`).Consistency(gocql.All).Iter()
	n := 0
	for id := (gocql.UUID{}); iter.Scan(&id); {
		if want[id] {
			n++
		}
	}
	require.NoError(e.t, iter.Close())
	return n
}

// SlowReadOnOneNode checks that a read its node answers after the adapter's speculative
// delay, on a session that knows that node alone, succeeds: with no second node it is not
// sent speculatively (gocql would answer a copy that finds no node with ErrNoConnections,
// ahead of the read still running).
func SlowReadOnOneNode(t *testing.T, a Adapter) {
	c := newCluster(t)
	c.restoreAtEnd(1)
	s := a.OneNode(t, c.hosts[0])
	read := func() error {
		var v string
		return driver.Scan(context.Background(), s, driver.Statement{CQL: `SELECT release_version FROM system.local`}, &v)
	}
	require.NoError(t, read())
	pid := c.pid(1)
	for range 3 {
		c.signal(1, syscall.SIGSTOP)
		thaw := time.AfterFunc(2*a.SpeculativeDelay, func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
		start := time.Now()
		err := read()
		took := time.Since(start)
		thaw.Stop()
		c.signal(1, syscall.SIGCONT)
		require.NoError(t, err, "a read answered after %v", took)
		require.Greater(t, took, a.SpeculativeDelay, "the read outlasted the speculative delay")
	}
}
