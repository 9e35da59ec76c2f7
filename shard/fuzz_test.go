package shard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// FuzzKey checks that every key ParseKey accepts formats back to itself, and every key
// FormatKey makes from valid parts parses back to those parts.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"q:0:0", "emails:12:3", "a.b-c_d:9999:0", "q:-1:0", "q::", "::", "q:1:2:3", "q~2:1:0", "q~0:1:0", "q~:1:0"} {
		f.Add(s, 3, 4)
	}
	f.Fuzz(func(t *testing.T, key string, ts, cs int) {
		if q, a, b, err := shard.ParseKey(key); err == nil {
			ring, _, _ := strings.Cut(key, ":")
			rq, g, ok := shard.ParseRing(ring)
			if !ok || rq != q || shard.FormatKey(shard.Layout{Queue: q, Generation: g}.Ring(), a, b) != key {
				t.Fatalf("ParseKey(%q) = %q %d %d, which formats differently", key, q, a, b)
			}
		}
		if !shard.ValidQueueName(key) || ts < 0 || cs < 0 {
			return
		}
		q, a, b, err := shard.ParseKey(shard.FormatKey(key, ts, cs))
		if err != nil || q != key || a != ts || b != cs {
			t.Fatalf("round trip of %q %d %d: %q %d %d %v", key, ts, cs, q, a, b, err)
		}
	})
}

// FuzzID checks, across the whole range of due times accepted (t.UnixNano
// overflows after 2262), that IDs keep their time to 100 ns, stay version 1, carry the
// time their bounds give, order as their times do, and map to an in-range concurrency
// shard; that the bounds are the driver's (gocql's MinTimeUUID and MaxTimeUUID); and
// that buckets hold their times.
func FuzzID(f *testing.F) {
	for _, at := range []time.Time{
		shard.MinIDTime, shard.MaxIDTime,
		time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC),
		time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC), // the last UnixNano
		time.Date(2300, 6, 1, 0, 0, 0, 0, time.UTC),
	} {
		f.Add(at.Unix(), uint32(at.Nanosecond()), at.Unix()+1, uint32(0), uint16(7), uint32(9_900))
	}
	f.Add(int64(-1), uint32(999_999_999), int64(0), uint32(0), uint16(1), uint32(0))
	f.Fuzz(func(t *testing.T, secA int64, nsA uint32, secB int64, nsB uint32, shards uint16, extraMs uint32) {
		if shards == 0 {
			return
		}
		a, b := inRange(secA, nsA), inRange(secB, nsB)
		id, idB := shard.NewID(a), shard.NewID(b)
		if id.Version() != 1 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("bad version/variant %v", id)
		}
		at := a.Truncate(100)
		if got := shard.IDTime(id); !got.Equal(at) {
			t.Fatalf("time %v came back as %v", at, got)
		}
		lo, hi := shard.MinID(a), shard.MaxID(a)
		if !shard.IDTime(hi).Equal(at) || !shard.IDTime(lo).Equal(at) {
			t.Fatal("bounds lost the time")
		}
		if lo != uuid.UUID(gocql.MinTimeUUID(a)) || hi != uuid.UUID(gocql.MaxTimeUUID(a)) {
			t.Fatalf("bounds of %v are %v and %v, not the driver's %v and %v", a, lo, hi, gocql.MinTimeUUID(a), gocql.MaxTimeUUID(a))
		}
		if [8]byte(id[:8]) != [8]byte(lo[:8]) {
			t.Fatalf("NewID(%v) carries another time than MinID: %v, %v", a, id, lo)
		}
		if shard.CompareIDs(lo, id) >= 0 || shard.CompareIDs(id, hi) >= 0 {
			t.Fatalf("%v not strictly between its bounds %v and %v", id, lo, hi)
		}
		if want, got := at.Compare(b.Truncate(100)), shard.CompareIDs(id, idB); want != 0 && got != want {
			t.Fatalf("IDs of %v and %v compare %d", a, b, got)
		}

		l := shard.Layout{Queue: "q", BucketCount: 1 + int(extraMs%10_000), ShardCount: int(shards),
			BucketDuration: shardqtype.MinBucketDuration + time.Duration(extraMs)*time.Millisecond}
		if s := l.ShardFor(id); s < 0 || s >= int(shards) {
			t.Fatalf("shard %d out of [0,%d)", s, shards)
		}
		bk := l.Bucket(a)
		if start, end := l.BucketStart(bk), l.BucketStart(bk+1); a.Before(start) || !a.Before(end) {
			t.Fatalf("%v in bucket %d of %v, which runs [%v, %v)", a, bk, l.BucketDuration, start, end)
		}
		if l.Bucket(b) < bk && !b.Before(a) || l.Bucket(b) > bk && !b.After(a) {
			t.Fatalf("buckets of %v and %v out of order", a, b)
		}
		if ts := l.TimeShard(bk); ts < 0 || ts >= l.BucketCount {
			t.Fatalf("time shard %d out of [0,%d)", ts, l.BucketCount)
		}
	})
}

// inRange maps any seconds and nanoseconds onto [MinIDTime, MaxIDTime].
func inRange(sec int64, ns uint32) time.Time {
	lo, hi := shard.MinIDTime.Unix(), shard.MaxIDTime.Unix()
	span := hi - lo // MaxIDTime falls on a whole second: it gets no nanoseconds
	off := sec % (span + 1)
	if off < 0 {
		off += span + 1
	}
	if lo+off == hi {
		ns = 0
	}
	return time.Unix(lo+off, int64(ns%1_000_000_000)).UTC()
}
