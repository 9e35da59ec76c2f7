// Command shardq operates shardq queues from a shell: it applies the schema, creates and
// shows queues, counts what a queue holds, shows the tasks due next without leasing
// them, and schedules tasks from scripts.
//
//	cd cmd/shardq && go install . # in a clone: it builds against the tree it sits in
//	shardq --keyspace app schema apply
//	shardq --keyspace app queue create emails --shards 8
//	echo '{"to":"alice"}' | shardq --keyspace app schedule emails --payload - --in 5m
//	shardq --keyspace app stats emails --watch
//
// Every command takes the connection flags (--hosts, --keyspace, --username,
// --password, --tls...), which also come from SHARDQ_CASSANDRA_* environment variables,
// and --json for one JSON object per line. Exit codes: 0 success; 1 the operation
// failed (Cassandra unreachable, no such queue or keyspace, a write failed); 2 bad usage
// (unknown command or flag, a missing or malformed argument, a value the queue's settings
// reject): nothing was written.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdApp())
	stop()
	os.Exit(code)
}
