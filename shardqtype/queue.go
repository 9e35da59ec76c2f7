package shardqtype

import (
	"time"

	"github.com/shardq/shardq/shard"
)

// Defaults for QueueConfig. A lap (BucketCount × BucketDuration) of 20 minutes
// leaves tombstones 10 minutes past the schema's gc_grace_seconds to be purged before
// consumers come back to a time shard.
const (
	DefaultBucketCount    = 120
	DefaultBucketDuration = 10 * time.Second
	DefaultShardCount     = 8
	DefaultTimeout        = 30 * time.Second
	DefaultLockTTL        = 3 * time.Second
)

// Task priorities: higher runs first among due tasks.
const (
	MinPriority = 0
	MaxPriority = 9
)

// Limits on QueueConfig.
const (
	MaxBucketCount = 10_000
	MaxShardCount  = 10_000
	// MinBucketDuration keeps buckets coarser than clock error and write latency.
	MinBucketDuration = 100 * time.Millisecond
	// MinLockTTL is 2 s because Cassandra expires TTLs on whole seconds: a 1 s lock could
	// last next to nothing.
	MinLockTTL = 2 * time.Second
	// MaxCompletedRetention matches how long dead letters are kept.
	MaxCompletedRetention = 30 * 24 * time.Hour
)

// QueueConfig is a queue's settings. They are stored when the queue is created and read
// back by every producer and consumer; they cannot change afterwards.
type QueueConfig struct {
	// Name names the queue: 1 to 63 of a-z 0-9 _ . -, starting with a letter or digit.
	Name string
	// BucketCount is how many time shards one lap of the ring has.
	// Defaults to DefaultBucketCount.
	BucketCount int
	// BucketDuration is how long each time shard collects due tasks; a whole
	// multiple of a millisecond. Defaults to DefaultBucketDuration.
	BucketDuration time.Duration
	// ShardCount is how many concurrency shards each time shard is split into: the most
	// consumers that can take tasks at once without contending. Defaults to DefaultShardCount.
	ShardCount int
	// DefaultTimeout is how long a consumer has to ack a task before it is delivered
	// again, unless the task sets its own; shorter than the lap less one bucket.
	// Defaults to DefaultTimeout.
	DefaultTimeout time.Duration
	// LockTTL is how long a shard lock lasts if its holder dies holding it; whole seconds,
	// because Cassandra's TTLs are, and at least MinLockTTL. Defaults to DefaultLockTTL.
	LockTTL time.Duration
	// CompletedRetention is how long inspect's Task still reports an acked task as completed; whole
	// seconds, at most MaxCompletedRetention. Zero keeps nothing: an acked task is not
	// found. Defaults to 0.
	CompletedRetention time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c QueueConfig) WithDefaults() QueueConfig {
	if c.BucketCount == 0 {
		c.BucketCount = DefaultBucketCount
	}
	if c.BucketDuration == 0 {
		c.BucketDuration = DefaultBucketDuration
	}
	if c.ShardCount == 0 {
		c.ShardCount = DefaultShardCount
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	return c
}

// Validate checks c after defaults are applied.
func (c QueueConfig) Validate() error {
	switch {
	case !shard.ValidQueueName(c.Name):
		return invalid("QueueConfig.Name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", c.Name)
	case c.BucketCount < 1 || c.BucketCount > MaxBucketCount:
		return invalid("QueueConfig.BucketCount", "%d is not in [1, %d]", c.BucketCount, MaxBucketCount)
	case c.BucketDuration < MinBucketDuration || c.BucketDuration%time.Millisecond != 0:
		return invalid("QueueConfig.BucketDuration", "%v is not a whole number of milliseconds of at least %v", c.BucketDuration, MinBucketDuration)
	case c.ShardCount < 1 || c.ShardCount > MaxShardCount:
		return invalid("QueueConfig.ShardCount", "%d is not in [1, %d]", c.ShardCount, MaxShardCount)
	case c.LockTTL < MinLockTTL || c.LockTTL%time.Second != 0:
		return invalid("QueueConfig.LockTTL", "%v is not a whole number of seconds of at least %v", c.LockTTL, MinLockTTL)
	case c.CompletedRetention < 0 || c.CompletedRetention > MaxCompletedRetention || c.CompletedRetention%time.Second != 0:
		return invalid("QueueConfig.CompletedRetention", "%v is not a whole number of seconds in [0, %v]", c.CompletedRetention, MaxCompletedRetention)
	}
	return c.ValidateTimeout("QueueConfig.DefaultTimeout", c.DefaultTimeout)
}

// MaxTimeout is the longest task timeout the queue allows: the lap less one
// bucket, so a task's lease ends before the ring comes back to its partition.
func (c QueueConfig) MaxTimeout() time.Duration {
	return time.Duration(c.BucketCount-1) * c.BucketDuration
}

// ValidateTimeout checks a task timeout against the queue's limits, naming field.
func (c QueueConfig) ValidateTimeout(field string, d time.Duration) error {
	if d < time.Millisecond || d%time.Millisecond != 0 || d > c.MaxTimeout() {
		return invalid(field, "%v is not a whole number of milliseconds in [1ms, %v] (the lap less one bucket)", d, c.MaxTimeout())
	}
	return nil
}

// Layout returns how the queue spreads tasks over partitions.
func (c QueueConfig) Layout() shard.Layout {
	return shard.Layout{Queue: c.Name, BucketCount: c.BucketCount, BucketDuration: c.BucketDuration, ShardCount: c.ShardCount}
}

// SettingsRefresh bounds how long a process acts on a queue's state as it last read it:
// a consumer reads whether its queue is paused at most this long ago, so every worker
// stops taking a queue's tasks within SettingsRefresh of PauseQueue returning (a fetch
// already under way ends first).
const SettingsRefresh = 5 * time.Second
