// Package layouts is a queue's layout history: the layout it was created with
// (generation 0) and each it changed to, with when that one takes effect.
//
// Every row, a task or a timeout marker, is written into the ring of the generation in
// force at the row's visible time (At), as the writer last read the history. Readers keep
// reading every generation from Drained on (Live), so a row written under a history
// read before a change is found in the ring it went to: the change takes effect far
// enough ahead of its write (see shardq.ChangeLayout) that only rows from writers which
// had not yet read it, or already due before it, land in an older ring. A generation is
// drained once nothing can be written into it any more and a full read of its ring found
// no task: readers stop reading it.
package layouts

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/shardq/shardq/shard"
)

// Gen is one generation: its layout and when it takes effect (zero for generation 0).
type Gen struct {
	Layout shard.Layout
	From   time.Time
}

// History is a queue's generations in order, History.Gens[i] being generation i, the
// first that may still hold rows, and a count of the history's writes, which makes every
// write's value differ from the one before (so a write can be voided by another with the
// same content: see shardq.ChangeLayout).
type History struct {
	Gens    []Gen
	Drained int
	Version int64
}

// stored is the JSON of the queues table's layouts column: the generations after the
// first, and Drained.
type stored struct {
	Gens    []storedGen `json:"gens"`
	Drained int         `json:"drained,omitempty"`
	Version int64       `json:"version"`
}

type storedGen struct {
	BucketCount    int   `json:"bucket_count"`
	BucketDuration int64 `json:"bucket_duration_ms"`
	ShardCount     int   `json:"shard_count"`
	From           int64 `json:"from_ms"`
}

// Decode reads the history of a queue created with layout first, raw being the stored
// column ("": the queue never changed).
func Decode(first shard.Layout, raw string) (History, error) {
	h := History{Gens: []Gen{{Layout: first}}}
	if raw == "" {
		return h, nil
	}
	var s stored
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return History{}, fmt.Errorf("layouts: decoding the layouts of queue %q: %w", first.Queue, err)
	}
	for i, g := range s.Gens {
		h.Gens = append(h.Gens, Gen{From: time.UnixMilli(g.From), Layout: shard.Layout{Queue: first.Queue, Generation: i + 1,
			BucketCount: g.BucketCount, BucketDuration: time.Duration(g.BucketDuration) * time.Millisecond, ShardCount: g.ShardCount}})
	}
	if s.Drained < 0 || s.Drained >= len(h.Gens) {
		return History{}, fmt.Errorf("layouts: queue %q: drained %d of %d generations", first.Queue, s.Drained, len(h.Gens))
	}
	h.Drained, h.Version = s.Drained, s.Version
	return h, nil
}

// Encode spells h as Decode reads it ("" for a queue that never changed).
func (h History) Encode() string {
	if len(h.Gens) <= 1 {
		return ""
	}
	s := stored{Drained: h.Drained, Version: h.Version}
	for _, g := range h.Gens[1:] {
		s.Gens = append(s.Gens, storedGen{BucketCount: g.Layout.BucketCount, BucketDuration: g.Layout.BucketDuration.Milliseconds(),
			ShardCount: g.Layout.ShardCount, From: g.From.UnixMilli()})
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // ints only
	}
	return string(b)
}

// At returns the layout in force at t: the last generation taking effect at or before t.
func (h History) At(t time.Time) shard.Layout {
	for i := len(h.Gens) - 1; i > 0; i-- {
		if !t.Before(h.Gens[i].From) {
			return h.Gens[i].Layout
		}
	}
	return h.Gens[0].Layout
}

// Last returns the newest generation.
func (h History) Last() Gen { return h.Gens[len(h.Gens)-1] }

// Live returns the layouts of the generations that may hold rows, oldest first.
func (h History) Live() []shard.Layout {
	out := make([]shard.Layout, 0, len(h.Gens)-h.Drained)
	for _, g := range h.Gens[h.Drained:] {
		out = append(out, g.Layout)
	}
	return out
}

// LongestLap returns the longest lap (shard.Layout.Lap) of the live generations.
func (h History) LongestLap() time.Duration {
	var lap time.Duration
	for _, l := range h.Live() {
		lap = max(lap, l.Lap())
	}
	return lap
}

// Sealed returns when nothing more can be written into generation g: when the next
// generation took effect, plus bound, the longest a writer may act on a history it read
// before that change; zero time and false for the newest generation.
func (h History) Sealed(g int, bound time.Duration) (time.Time, bool) {
	if g+1 >= len(h.Gens) {
		return time.Time{}, false
	}
	return h.Gens[g+1].From.Add(bound), true
}

// Place returns the layout a row visible at t is written under by a writer whose clock
// reads now: the one in force at t, or at now for a row already visible, so that once
// every writer's clock has passed a generation's successor's From, none writes into it
// whatever the rows' times (a series catching up, say).
func (h History) Place(t, now time.Time) shard.Layout {
	if t.Before(now) {
		t = now
	}
	return h.At(t)
}

// Fixed returns the layout of a row whose place its ID fixes whoever writes it (a series'
// occurrence, written again by whoever finds it unwritten): the one in force at t, or the
// oldest live one when that one is drained. Writers with the same history agree on it;
// across a change they may not, which can leave a copy of the row in each (a duplicate,
// never a loss).
func (h History) Fixed(t time.Time) shard.Layout {
	l := h.At(t)
	if l.Generation < h.Drained {
		return h.Gens[h.Drained].Layout
	}
	return l
}
