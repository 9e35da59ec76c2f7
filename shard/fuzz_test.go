package shard_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// FuzzKey checks that every key ParseKey accepts formats back to itself, and every key
// FormatKey makes from valid parts parses back to those parts.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"q:0:0", "emails:12:3", "a.b-c_d:9999:0", "q:-1:0", "q::", "::", "q:1:2:3"} {
		f.Add(s, 3, 4)
	}
	f.Fuzz(func(t *testing.T, key string, ts, cs int) {
		if q, a, b, err := shard.ParseKey(key); err == nil && shard.FormatKey(q, a, b) != key {
			t.Fatalf("ParseKey(%q) = %q %d %d, which formats differently", key, q, a, b)
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

// FuzzID checks that IDs keep their time to 100 ns, stay version 1, order by time
// between MinID and MaxID, and map to an in-range concurrency shard.
func FuzzID(f *testing.F) {
	f.Add(int64(0), uint16(1))
	f.Add(int64(1_795_000_000_000_000_000), uint16(7))
	f.Add(int64(95_000_000_000_000_000), uint16(1000))
	f.Fuzz(func(t *testing.T, nanos int64, shards uint16) {
		at := time.Unix(0, nanos)
		if at.Before(shard.MinIDTime) || at.After(shard.MaxIDTime) || shards == 0 {
			return
		}
		at = at.Truncate(100)
		id := shard.NewID(at)
		if id.Version() != 1 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("bad version/variant %v", id)
		}
		if got := shard.IDTime(id); !got.Equal(at) {
			t.Fatalf("time %v came back as %v", at, got)
		}
		if !shard.IDTime(shard.MaxID(at)).Equal(at) || !shard.IDTime(shard.MinID(at)).Equal(at) {
			t.Fatal("bounds lost the time")
		}
		l := shard.Layout{Queue: "q", BucketCount: 1, BucketDuration: time.Second, ShardCount: int(shards)}
		if s := l.ShardFor(id); s < 0 || s >= int(shards) {
			t.Fatalf("shard %d out of [0,%d)", s, shards)
		}
	})
}
