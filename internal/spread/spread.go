// Package spread decides which of a layout's concurrency shards a producer places a task
// in: the first one while few tasks come due in a second, the next ones in turn as more
// do, any of them once each of them holds its share.
//
// Every round, a consumer reads the wake-up signal cells of a bucket and takes the lock
// and reads the rows of each partition whose cell was touched; a partition with no task
// costs it only its share of the signal read. A queue whose tasks sit in few partitions
// therefore costs its consumers few locks and reads per round, and one whose tasks spread
// over all of them costs a lock, a read and a swap per partition per round whatever each
// carries. Concentrating is safe because it changes only which shard an ID names: a
// task's shard is always taken from its ID (shard.Layout.ShardFor), by the producer, the
// consumer, lookups and signals alike, and consumers read every shard of the layout.
package spread

import (
	"sync"
	"time"
)

// maxSeconds bounds the seconds counted at once. Past it, seconds already past are
// dropped: no task is placed before now, so none is counted in them again. If every
// second kept is still to come, all are forgotten, which at worst puts a second's later
// tasks in fewer shards than its count would.
const maxSeconds = 1 << 14

// Counter counts, per ring of partitions and second of due time, the tasks a producer
// placed. Its zero value is not usable; make one with New. It is safe for concurrent use.
type Counter struct {
	perShard int
	mu       sync.Mutex
	placed   map[second]int
}

type second struct {
	ring string
	unix int64
}

// New returns a Counter that fills each shard with perShard tasks of a second before it
// opens the next.
func New(perShard int) *Counter {
	return &Counter{perShard: max(perShard, 1), placed: map[second]int{}}
}

// Any is the shard Shard returns for a task that may go to any shard.
const Any = -1

// Shard counts one more task placed in ring at t (not before now) and returns the shard
// of n it goes to: (tasks placed before it in the same second) / perShard, so each shard
// holds at most perShard tasks of a second until all n do, or Any past that. Filling
// shards in turn, rather than drawing among the first few, keeps every shard in use
// below perShard a second, and a fixed shard costs an ID no more random bits than the
// choice among n itself.
func (c *Counter) Shard(ring string, t, now time.Time, n int) int {
	k := second{ring, t.Unix()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.placed[k]; !ok && len(c.placed) >= maxSeconds {
		for s := range c.placed {
			if s.unix < now.Unix() {
				delete(c.placed, s)
			}
		}
		if len(c.placed) >= maxSeconds {
			clear(c.placed)
		}
	}
	before := c.placed[k]
	c.placed[k] = before + 1
	if s := before / c.perShard; s < n {
		return s
	}
	return Any
}
