// Package taskid makes task IDs that say which queues they may belong to, so a task can
// be looked up by its ID alone.
package taskid

import (
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// New is shard.NewID for a task's own ID: its 14-bit clock sequence is HintOf(queue)
// instead of random bits (48 random bits remain, in the node).
func New(t time.Time, queue string) uuid.UUID {
	id := shard.NewID(t)
	h := HintOf(queue)
	id[8] = 0x80 | byte(h>>8) // the RFC 4122 variant, then the hint's top 6 bits
	id[9] = byte(h)
	return id
}

// Hint returns the 14 bits of a task ID made by New that come from its queue's name;
// tasks of two queues share them with a chance of 1 in 16,384.
func Hint(id uuid.UUID) uint16 { return binary.BigEndian.Uint16(id[8:]) & 0x3fff }

// HintOf is Hint of the task IDs of queue.
func HintOf(queue string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(queue))
	return uint16(h.Sum32() & 0x3fff)
}

// NewIn is New for a task that a layout of n concurrency shards places in shard s
// (shard.Layout.ShardFor(id) == s), or in any when s is negative: its node bits move to
// the one value of their block of n that names s. Every place that finds the task's
// partition from its ID finds the same shard, so nothing else needs to know s.
func NewIn(t time.Time, queue string, n, s int) uuid.UUID {
	for {
		id := New(t, queue)
		if s < 0 || n <= 1 {
			return id
		}
		v := binary.BigEndian.Uint64(id[8:])
		// A block of n that crosses the node bits' ends would borrow from or carry into
		// the hint's bits: 1 in 2^47/n.
		if node := v & (1<<48 - 1); node < uint64(n) || node >= 1<<48-uint64(n) {
			continue
		}
		binary.BigEndian.PutUint64(id[8:], v-v%uint64(n)+uint64(s))
		return id
	}
}
