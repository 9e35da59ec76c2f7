// Package shard maps tasks onto partitions: which time shard and concurrency shard a task
// lands in, how a partition key is spelled, and the time-ordered task IDs that order
// tasks inside a partition.
//
// Time shards roll: bucket = floor(t / BucketDuration) counts from the Unix epoch, and a
// partition's time shard is bucket mod BucketCount. The partitions of one lap, BucketCount
// × BucketDuration long, are reused by the next lap, which gives tombstones the whole lap
// to be purged before consumers come back.
package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shardq/shardq/internal/random"

	"github.com/google/uuid"
)

// Layout is how one queue spreads its tasks over partitions.
type Layout struct {
	Queue          string
	BucketCount    int
	BucketDuration time.Duration
	ShardCount     int
	// Generation counts the queue's layout changes: 0 for the layout it was created
	// with. Each generation is a ring of partitions of its own (see Ring), so two
	// layouts never share a partition, a lock row or a signal cell.
	Generation int
}

// Ring names the generation's ring of partitions: the queue's name for generation 0, so
// the keys of queues that never changed stay as they were, and '<queue>~<generation>'
// after, which no queue name can spell ('~' is not allowed in one).
func (l Layout) Ring() string {
	if l.Generation == 0 {
		return l.Queue
	}
	return l.Queue + "~" + strconv.Itoa(l.Generation)
}

// Bucket returns the absolute bucket number of t (floor division, so times before the
// epoch get negative buckets rather than sharing bucket 0).
func (l Layout) Bucket(t time.Time) int64 {
	if ms, ok := l.bucketMillis(); ok {
		// Milliseconds: t.UnixNano overflows after 2262, and due times go to MaxIDTime.
		return floorDiv(t.UnixMilli(), ms)
	}
	return floorDiv(t.UnixNano(), l.BucketDuration.Nanoseconds())
}

// BucketStart returns the first instant of bucket b.
func (l Layout) BucketStart(b int64) time.Time {
	if ms, ok := l.bucketMillis(); ok {
		return time.UnixMilli(b * ms)
	}
	return time.Unix(0, b*l.BucketDuration.Nanoseconds())
}

// bucketMillis returns BucketDuration in milliseconds when it is a whole number of them,
// as QueueConfig.Validate requires. Only a Layout built by hand can have another
// duration, and its buckets are right only between 1678 and 2262, where t.UnixNano is.
func (l Layout) bucketMillis() (int64, bool) {
	d := l.BucketDuration
	return d.Milliseconds(), d%time.Millisecond == 0
}

func floorDiv(n, d int64) int64 {
	q := n / d
	if n%d < 0 {
		q--
	}
	return q
}

// Lap is how long one lap of time shards lasts: BucketCount × BucketDuration.
func (l Layout) Lap() time.Duration {
	return time.Duration(l.BucketCount) * l.BucketDuration
}

// TimeShard returns bucket b's time shard, always in [0, BucketCount).
func (l Layout) TimeShard(b int64) int {
	n := int64(l.BucketCount)
	return int(((b % n) + n) % n)
}

// Key returns the partition key of bucket b's concurrency shard s.
func (l Layout) Key(b int64, s int) string {
	return FormatKey(l.Ring(), l.TimeShard(b), s)
}

// ShardFor returns the concurrency shard of the task with this ID, in [0, ShardCount).
// It is taken from the ID's random bits, unsigned, so it is never negative and spreads
// evenly.
func (l Layout) ShardFor(id uuid.UUID) int {
	return int(binary.BigEndian.Uint64(id[8:]) % uint64(l.ShardCount))
}

var queueName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ErrBadKey means a string is not a partition key of this format.
var ErrBadKey = errors.New("shard: malformed partition key")

// ValidQueueName reports whether name may name a queue: 1 to 63 of a-z 0-9 _ . -,
// starting with a letter or digit. Names never contain ':' so keys parse unambiguously.
func ValidQueueName(name string) bool { return queueName.MatchString(name) }

// FormatKey spells the partition key '<ring>:<timeShard>:<concurrencyShard>', ring being
// a Layout's Ring.
func FormatKey(ring string, timeShard, concurrencyShard int) string {
	return ring + ":" + strconv.Itoa(timeShard) + ":" + strconv.Itoa(concurrencyShard)
}

// ParseKey splits a partition key made by FormatKey, returning the queue's name without
// the ring's generation (see ParseRing).
func ParseKey(key string) (queue string, timeShard, concurrencyShard int, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 3 {
		return "", 0, 0, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	queue, _, ok := ParseRing(parts[0])
	ts, err1 := strconv.Atoi(parts[1])
	cs, err2 := strconv.Atoi(parts[2])
	if !ok || err1 != nil || err2 != nil || ts < 0 || cs < 0 || FormatKey(parts[0], ts, cs) != key {
		return "", 0, 0, fmt.Errorf("%w: %q", ErrBadKey, key)
	}
	return queue, ts, cs, nil
}

// ParseRing splits a Layout's Ring into the queue's name and the generation.
func ParseRing(ring string) (queue string, generation int, ok bool) {
	queue, gen, tagged := strings.Cut(ring, "~")
	if !ValidQueueName(queue) {
		return "", 0, false
	}
	if !tagged {
		return queue, 0, true
	}
	g, err := strconv.Atoi(gen)
	if err != nil || g < 1 || strconv.Itoa(g) != gen {
		return "", 0, false
	}
	return queue, g, true
}

// uuidEpoch is 1582-10-15, where version 1 UUID time starts, in 100 ns units before 1970.
const uuidEpoch = 0x01B21DD213814000

// MinIDTime and MaxIDTime bound the times an ID can carry: the Unix epoch, and the end
// of the 60-bit UUID clock (year 5236) less a margin.
var (
	MinIDTime = time.Unix(0, 0)
	MaxIDTime = time.Date(5000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// NewID returns a version 1 UUID (Cassandra's timeuuid) carrying time t to 100 ns, with
// 62 random bits in its clock sequence and node so IDs with equal times still differ.
// Cassandra orders timeuuids by their time first. t must lie in [MinIDTime, MaxIDTime].
func NewID(t time.Time) uuid.UUID {
	var r [8]byte
	random.Read(r[:])
	return timeUUID(ticks(t), r[0], r[1], [6]byte(r[2:]))
}

// MinID and MaxID are the smallest and greatest IDs Cassandra orders at time t, for
// slice bounds. They are not unique IDs. Cassandra orders the clock sequence and node
// bytes as signed bytes: 0x80 is the least, 0x7f the greatest (and the variant bits keep
// the first of them in 0x80-0xbf). These are the bounds the drivers make.
func MinID(t time.Time) uuid.UUID {
	return timeUUID(ticks(t), 0x80, 0x80, [6]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80})
}

// MaxID: see MinID.
func MaxID(t time.Time) uuid.UUID {
	return timeUUID(ticks(t), 0x7f, 0x7f, [6]byte{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f})
}

// timeUUID lays out a version 1 UUID (RFC 9562): ticks, the 60-bit time in 100 ns since
// the UUID epoch, in its three fields, then the clock sequence (its top two bits replaced
// by the variant) and the node.
func timeUUID(ticks int64, clockHi, clockLo byte, node [6]byte) uuid.UUID {
	var u uuid.UUID
	u[0], u[1], u[2], u[3] = byte(ticks>>24), byte(ticks>>16), byte(ticks>>8), byte(ticks)
	u[4], u[5] = byte(ticks>>40), byte(ticks>>32)
	u[6], u[7] = byte(ticks>>56)&0x0f|0x10, byte(ticks>>48)
	u[8], u[9] = clockHi&0x3f|0x80, clockLo
	copy(u[10:], node[:])
	return u
}

// IDTime returns the time an ID carries, to 100 ns.
func IDTime(id uuid.UUID) time.Time {
	n := int64(id.Time()) - uuidEpoch
	// Seconds and a remainder, not nanoseconds, which overflow after 2262 (time.Unix
	// takes a negative remainder before 1970).
	return time.Unix(n/ticksPerSecond, n%ticksPerSecond*100)
}

const ticksPerSecond = 10_000_000 // 100 ns ticks

// ticks returns t in 100 ns units since the UUID epoch, from t's seconds: t.UnixNano
// would overflow after 2262.
func ticks(t time.Time) int64 {
	return t.Unix()*ticksPerSecond + int64(t.Nanosecond()/100) + uuidEpoch
}

// CompareIDs orders two IDs the way Cassandra orders timeuuids: by time, then by their
// last eight bytes compared as signed bytes. It returns -1, 0 or 1.
func CompareIDs(a, b uuid.UUID) int {
	if ta, tb := a.Time(), b.Time(); ta != tb {
		if ta < tb {
			return -1
		}
		return 1
	}
	for i := 8; i < 16; i++ {
		if x, y := int8(a[i]), int8(b[i]); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
