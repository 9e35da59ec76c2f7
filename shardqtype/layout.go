package shardqtype

import (
	"time"

	"github.com/shardq/shardq/shard"
)

// Bounds of layout changes.
const (
	// LayoutLead is the least time from ChangeLayout's write to when the new layout
	// takes effect: three SettingsRefresh, in which every producer and consumer reads it
	// at least twice, plus a clock skew of up to two seconds between them. Rows due before
	// then, or written by a process that has not read the change yet, go to the old
	// layout, which consumers keep reading until it is drained.
	LayoutLead = 3*SettingsRefresh + 2*time.Second
	// MaxLayoutAlign bounds how far past LayoutLead a change may take effect: it takes
	// effect at a boundary of both the old and the new buckets, which must come within it.
	MaxLayoutAlign = time.Hour
	// MaxLiveLayouts is the most layouts consumers read at once: the current one and
	// those still draining.
	MaxLiveLayouts = 4
)

// LayoutConfig is a queue's new layout for ChangeLayout. Its fields mean what
// QueueConfig's of the same names do, and obey the same limits.
type LayoutConfig struct {
	// ShardCount is the new count of concurrency shards. Defaults to the current one.
	ShardCount int
	// BucketCount is the new count of time shards per lap. Defaults to the current one.
	BucketCount int
	// BucketDuration is the new length of a time shard. Defaults to the current one.
	BucketDuration time.Duration
}

// LayoutChange is what ChangeLayout did: the layout's generation (0 is the one the queue
// was created with) and when it takes effect.
type LayoutChange struct {
	Generation int
	From       time.Time
}

// LayoutInfo is one of a queue's layouts.
type LayoutInfo struct {
	Layout shard.Layout
	From   time.Time
	// Drained is set once consumers no longer read the layout: it can hold no task.
	Drained bool
}
