package shardqtype

import "github.com/shardq/shardq/internal/driver"

// Driver is a session of a CQL driver, on the keyspace that holds shardq's tables, and
// what the parts built on it share: the cluster's clock, the cache of queue settings,
// the coalescing of wake-up signals and the wake-up of idle workers in this process.
// Make one per session with the adapter of the driver the session is of:
// shardqgocql.New for github.com/gocql/gocql, shardqgocqlv2.New (a module of its own)
// for the Apache Cassandra GoCQL driver v2. Build every part of a process on the same
// Driver.
type Driver = driver.Driver
