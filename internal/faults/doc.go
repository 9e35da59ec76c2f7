// Package faults holds shardq's fault tests: a three-node cluster at replication factor 3
// loses a node, has one frozen, has one restarted with its data (and kept down longer than
// gc_grace_seconds, so deleted tasks come back), and has worker processes killed. Every
// test goes through the public API with workers in separate OS processes and a producer
// that writes tasks as they come due, through the fault, and reports lost tasks and tasks
// started before their due time (both always zero), duplicates (each explained by a killed
// worker) and lateness.
//
// The package holds the scenarios and their harness; each adapter's module runs them in a
// test binary of its own (TestWorkerProcess there is the worker process), on a session of
// that adapter: this module's tests run every scenario on github.com/gocql/gocql, those of
// shardqgocqlv2 the ones where the driver decides the outcome (a frozen node, a slow read
// on a session of one node) on the Apache driver v2.
//
// The tests build only with the faults tag and need the nodes of scripts/cassandra, which
// they signal, stop and restart: `make test-cluster` starts three, runs the whole suite at
// RF 3 and then these tests. Without such a cluster they fail; they are never skipped.
// SHARDQ_FAULTS_JSON names a file each test appends its figures to as a JSON line.
package faults
