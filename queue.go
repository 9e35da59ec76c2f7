// Package shardq is a durable queue of delayed and scheduled tasks on Apache Cassandra.
//
// This package holds what producers and consumers share: the schema (ApplySchema), queue
// settings stored in Cassandra (CreateQueue, LoadQueue), errors and the clock. Producers
// live in package producer, consumers in package consumer, the per-shard lock in lock,
// and the partition layout in shard.
package shardq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
)

// Defaults for QueueConfig. A ring window (BucketCount × BucketDuration) of 20 minutes
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
	// again, unless the task sets its own; shorter than the ring window less one bucket.
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
		return Invalid("QueueConfig.Name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", c.Name)
	case c.BucketCount < 1 || c.BucketCount > MaxBucketCount:
		return Invalid("QueueConfig.BucketCount", "%d is not in [1, %d]", c.BucketCount, MaxBucketCount)
	case c.BucketDuration < MinBucketDuration || c.BucketDuration%time.Millisecond != 0:
		return Invalid("QueueConfig.BucketDuration", "%v is not a whole number of milliseconds of at least %v", c.BucketDuration, MinBucketDuration)
	case c.ShardCount < 1 || c.ShardCount > MaxShardCount:
		return Invalid("QueueConfig.ShardCount", "%d is not in [1, %d]", c.ShardCount, MaxShardCount)
	case c.LockTTL < MinLockTTL || c.LockTTL%time.Second != 0:
		return Invalid("QueueConfig.LockTTL", "%v is not a whole number of seconds of at least %v", c.LockTTL, MinLockTTL)
	case c.CompletedRetention < 0 || c.CompletedRetention > MaxCompletedRetention || c.CompletedRetention%time.Second != 0:
		return Invalid("QueueConfig.CompletedRetention", "%v is not a whole number of seconds in [0, %v]", c.CompletedRetention, MaxCompletedRetention)
	}
	return c.ValidateTimeout("QueueConfig.DefaultTimeout", c.DefaultTimeout)
}

// MaxTimeout is the longest task timeout the queue allows: the ring window less one
// bucket, so a task's lease ends before the ring comes back to its partition.
func (c QueueConfig) MaxTimeout() time.Duration {
	return time.Duration(c.BucketCount-1) * c.BucketDuration
}

// ValidateTimeout checks a task timeout against the queue's limits, naming field.
func (c QueueConfig) ValidateTimeout(field string, d time.Duration) error {
	if d < time.Millisecond || d%time.Millisecond != 0 || d > c.MaxTimeout() {
		return Invalid(field, "%v is not a whole number of milliseconds in [1ms, %v] (the ring window less one bucket)", d, c.MaxTimeout())
	}
	return nil
}

// Layout returns how the queue spreads tasks over partitions.
func (c QueueConfig) Layout() shard.Layout {
	return shard.Layout{Queue: c.Name, BucketCount: c.BucketCount, BucketDuration: c.BucketDuration, ShardCount: c.ShardCount}
}

// CreateQueue stores a queue's settings, or checks them against the stored ones when the
// queue exists: a difference is a *QueueMismatchError. It returns the settings in force.
func CreateQueue(ctx context.Context, session *gocql.Session, cfg QueueConfig) (QueueConfig, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return QueueConfig{}, err
	}
	queues := store.For(session).Queues()
	var stored QueueConfig // the settings in force when the insert did not apply
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		applied, existing, err := queues.Create(ctx, store.Queue(cfg))
		stored = QueueConfig(existing)
		return applied, err
	}, func(rctx context.Context, cause error) (bool, error) {
		// A straggling insert can only store these same settings, so nothing needs voiding:
		// whatever the read finds (ours or another creator's) is compared like a row the
		// insert returned.
		var lerr error
		stored, lerr = loadQueue(rctx, queues, cfg.Name)
		switch {
		case errors.Is(lerr, ErrQueueNotFound):
			return false, fmt.Errorf("%w (not stored when read back)", cause)
		case lerr != nil:
			return false, fmt.Errorf("%w: %w (reading it back: %w)", lwt.ErrOutcomeUnknown, cause, lerr)
		}
		return false, nil
	})
	switch {
	case err != nil:
		return QueueConfig{}, fmt.Errorf("shardq: creating queue %q: %w", cfg.Name, err)
	case applied:
		return cfg, nil
	}
	return stored, compare(stored, cfg)
}

// LoadQueue reads a queue's settings, or returns ErrQueueNotFound.
func LoadQueue(ctx context.Context, session *gocql.Session, name string) (QueueConfig, error) {
	return loadQueue(ctx, store.For(session).Queues(), name)
}

func loadQueue(ctx context.Context, queues store.Queues, name string) (QueueConfig, error) {
	if !shard.ValidQueueName(name) {
		return QueueConfig{}, Invalid("queue name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", name)
	}
	// Read at SERIAL, which completes any creation still in flight, so a queue just
	// created is seen.
	q, err := queues.Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return QueueConfig{}, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	if err != nil {
		return QueueConfig{}, fmt.Errorf("shardq: loading queue %q: %w", name, err)
	}
	return QueueConfig(q), nil
}

func compare(stored, given QueueConfig) error {
	mismatch := func(field string, s, g any) error {
		return &QueueMismatchError{Queue: given.Name, Field: field, Stored: s, Given: g}
	}
	switch {
	case stored.BucketCount != given.BucketCount:
		return mismatch("BucketCount", stored.BucketCount, given.BucketCount)
	case stored.BucketDuration != given.BucketDuration:
		return mismatch("BucketDuration", stored.BucketDuration, given.BucketDuration)
	case stored.ShardCount != given.ShardCount:
		return mismatch("ShardCount", stored.ShardCount, given.ShardCount)
	case stored.DefaultTimeout != given.DefaultTimeout:
		return mismatch("DefaultTimeout", stored.DefaultTimeout, given.DefaultTimeout)
	case stored.LockTTL != given.LockTTL:
		return mismatch("LockTTL", stored.LockTTL, given.LockTTL)
	case stored.CompletedRetention != given.CompletedRetention:
		return mismatch("CompletedRetention", stored.CompletedRetention, given.CompletedRetention)
	}
	return nil
}
