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

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// CreateQueue stores a queue's settings, or checks them against the stored ones when the
// queue exists: a difference is a *QueueMismatchError. It returns the settings in force.
func CreateQueue(ctx context.Context, d *shardqtype.Driver, cfg QueueConfig) (QueueConfig, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return QueueConfig{}, err
	}
	queues := sessionstate.For(d, nil).Store.Queues()
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
func LoadQueue(ctx context.Context, d *shardqtype.Driver, name string) (QueueConfig, error) {
	return loadQueue(ctx, sessionstate.For(d, nil).Store.Queues(), name)
}

func loadQueue(ctx context.Context, queues store.Queues, name string) (QueueConfig, error) {
	if !shard.ValidQueueName(name) {
		return QueueConfig{}, defaults.Invalid("queue name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", name)
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
