// Package shardqtype holds the types every layer of shardq shares: the driver, task info,
// queue and layout settings, observer events, the clock and the errors callers branch on.
// It imports no other package of the library but shard and internal/driver, so the root
// package, the recipe packages and the internals can all use it; package shardq
// re-exports its names.
package shardqtype
