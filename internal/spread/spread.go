// Package spread decides which of a layout's concurrency shards a producer places a task
// in: the first one while few tasks come due in a tenth of a second, the next ones in
// turn as more do, any of them once each of them holds its share.
//
// Every round, a consumer reads the wake-up signal cells of a bucket and takes the lock
// and reads the rows of each partition whose cell was touched; a partition with no task
// costs it only its share of the signal read. A queue whose tasks sit in few partitions
// therefore costs its consumers few locks and reads per round, and one whose tasks spread
// over all of them costs a lock, a read and a swap per partition per round whatever each
// carries. Concentrating is safe because it changes only which shard an ID names: a
// task's shard is always taken from its ID (shard.Layout.ShardFor), by the producer, the
// consumer, lookups and signals alike, and consumers read every shard of the layout.
//
// Tasks are counted per tenth of a second of due time, not per second: filled per
// second, a queue scheduled in due order at 2,500 tasks/s put each 80 ms of due tasks in
// one shard, so each round found one partition with hundreds of tasks and the others
// empty, and cost a fifth more node CPU per task with a higher lateness p99 than spreading
// over all shards. Per tenth, the same queue spreads each round's tasks over every shard,
// while one at 100 tasks/s still fills only the first.
package spread

import (
	"sync"
	"time"
)

// Tenth is the span of due time counted together.
const Tenth = 100 * time.Millisecond

// maxTenths bounds the tenths counted at once. Past it, tenths already past are dropped:
// no task is placed before now, so none is counted in them again. If every tenth kept is
// still to come, all are forgotten, which at worst puts a tenth's later tasks in fewer
// shards than its count would.
const maxTenths = 1 << 16

// Counter counts, per ring of partitions and tenth of a second of due time, the tasks a
// producer placed. Its zero value is not usable; make one with New. It is safe for
// concurrent use.
type Counter struct {
	perShard int
	mu       sync.Mutex
	placed   map[tenth]int
}

type tenth struct {
	ring string
	n    int64 // tenths since the Unix epoch
}

// New returns a Counter that fills each shard with perSecond/10 tasks of a tenth of a
// second, rounded up, before it opens the next.
func New(perSecond int) *Counter {
	perShard := perSecond / 10
	if perSecond%10 != 0 || perShard == 0 {
		perShard++
	}
	return &Counter{perShard: perShard, placed: map[tenth]int{}}
}

// Any is the shard Shard returns for a task that may go to any shard.
const Any = -1

// Shard counts one more task placed in ring at t (not before now) and returns the shard
// of n it goes to: (tasks placed before it in the same tenth) / the Counter's share per
// shard, so each shard holds at most that share of a tenth until all n do, or Any past
// that. Filling shards in turn, rather than drawing among the first few, keeps every
// shard in use at its share, and a fixed shard costs an ID no more random bits than the
// choice among n itself.
func (c *Counter) Shard(ring string, t, now time.Time, n int) int {
	k := tenth{ring, t.UnixMilli() / Tenth.Milliseconds()} // UnixNano ends in 2262
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.placed[k]; !ok && len(c.placed) >= maxTenths {
		past := now.UnixMilli() / Tenth.Milliseconds()
		for s := range c.placed {
			if s.n < past {
				delete(c.placed, s)
			}
		}
		if len(c.placed) >= maxTenths {
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
