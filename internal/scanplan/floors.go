package scanplan

import (
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// Read floors: why reads cost the same however much a partition has drained.
//
// Every row is written with an ID time no earlier than its writer's clock at the time of
// the write: a pending task's due time, clamped up to when it was scheduled; a marker's
// lease deadline; a retry's next due time. So once a consumer read a partition at time T
// and found the rows of a priority up to some point consumed or absent, no row can later
// appear in that priority below min(that point, T - MaxClockSkew) as long as clocks and
// write latency stay within MaxClockSkew. That bound is the priority's floor, and reads
// start above it with `id > floor`: Cassandra seeks past every tombstone beneath it.
//
// Floors are kept per partition and lap in memory, and written into the partition's lock
// row by every swap, in the same fenced transaction, so that another consumer (or this
// one after a restart) starts from them. A partition with no floor for the current lap
// is read from the start of the previous lap, so a row written late in the previous lap
// is still found.

// NPriorities is how many priorities there are; floors are indexed by priority less
// shardqtype.MinPriority.
const NPriorities = shardqtype.MaxPriority - shardqtype.MinPriority + 1

// AllPriorities lists the priorities highest first, as a read of every row asks for them.
var AllPriorities = func() []int8 {
	var p []int8
	for i := shardqtype.MaxPriority; i >= shardqtype.MinPriority; i-- {
		p = append(p, int8(i))
	}
	return p
}()

// floors holds, per priority, an exclusive lower bound on the IDs of the live rows of a
// partition's lap.
type floors [NPriorities]uuid.UUID

// lapFloors are a partition's floors in the lap of bucket.
type lapFloors struct {
	bucket int64
	f      floors
}

// Span is what one read of a partition covered, to move its floors.
type Span struct {
	readAt   time.Time         // the clock before the read was sent
	full     [NPriorities]bool // priorities read up to the upper bound
	cut      bool              // the read stopped inside priority cutPrio, at row cutID
	cutPrio  int8
	cutID    uuid.UUID
	first    [NPriorities]uuid.UUID // first row read per priority; zero if none
	consumed bool                   // every row read was deleted (a swap that applied)
}

// NewSpan starts the span of a read sent at readAt.
func NewSpan(readAt time.Time) Span { return Span{readAt: readAt} }

// Note records row (prio, id) as read, in clustering order.
func (s *Span) Note(prio int8, id uuid.UUID) {
	if s.first[prio] == (uuid.UUID{}) {
		s.first[prio] = id
	}
	s.cutPrio, s.cutID = prio, id
}

// Cover records that group g was read: in full, or, when the read stopped at its limit,
// up to the last row noted (priorities of g above that row's were read in full).
func (s *Span) Cover(g Group, stopped bool) {
	s.cut = stopped
	for _, p := range g.Prios {
		if !stopped || p > s.cutPrio {
			s.full[p] = true
		}
	}
}

// Cut reports whether the read stopped at a limit: the partition may hold more.
func (s *Span) Cut() bool { return s.cut }

// raise moves f up by what s saw. A priority read in full rests at the earliest row left
// in it, or at readAt less the skew when it held none; the priority a read stopped in
// rests at its last row consumed, or its first row left.
func (f *floors) raise(s Span, skew time.Duration) {
	settled := shard.MinID(s.readAt.Add(-skew))
	for p := range NPriorities {
		var cand uuid.UUID
		switch {
		case s.full[p] && (s.consumed || s.first[p] == (uuid.UUID{})):
			cand = settled
		case s.full[p]:
			cand = minID(justBelow(shard.IDTime(s.first[p])), settled)
		case s.cut && int(s.cutPrio) == p && s.consumed:
			cand = minID(s.cutID, settled)
		case s.cut && int(s.cutPrio) == p:
			cand = minID(justBelow(shard.IDTime(s.first[p])), settled)
		default:
			continue
		}
		if shard.CompareIDs(cand, f[p]) > 0 {
			f[p] = cand
		}
	}
}

// justBelow is the greatest floor that still lets a read find rows of time at.
func justBelow(at time.Time) uuid.UUID { return shard.MinID(at.Add(-100 * time.Nanosecond)) }

// above reports whether some priority's floor lies at or above time at: a row of that
// time written now would not be read.
func (f *floors) above(at time.Time) bool {
	id := shard.MinID(at)
	for _, fl := range f {
		if shard.CompareIDs(fl, id) >= 0 {
			return true
		}
	}
	return false
}

func minID(a, b uuid.UUID) uuid.UUID {
	if shard.CompareIDs(a, b) <= 0 {
		return a
	}
	return b
}

// Group is a run of priorities, highest first, read by one query from one floor
// (exclusive).
type Group struct {
	Prios []int8
	Floor uuid.UUID
}

// Groups is the runs a read from floors f makes (see floors.groups): how consumers read a
// partition, which the inspector reads as they do.
func Groups(f [NPriorities]uuid.UUID, skew time.Duration) []Group {
	return (*floors)(&f).groups(skew)
}

// groups splits the priorities into runs whose floors lie within skew of each other,
// each read from its lowest floor. Usually that is one run; a priority drained far behind
// the others (a backlog) gets its own, so the others' tombstones between its floor and
// theirs are not scanned.
func (f *floors) groups(skew time.Duration) []Group {
	var groups []Group
	var lo, hi time.Time
	for p := shardqtype.MaxPriority; p >= shardqtype.MinPriority; p-- {
		t := shard.IDTime(f[p])
		if n := len(groups); n > 0 && t.Sub(lo) <= skew && hi.Sub(t) <= skew {
			g := &groups[n-1]
			g.Prios = append(g.Prios, int8(p))
			g.Floor = minID(g.Floor, f[p])
			lo, hi = minTime(lo, t), maxTime(hi, t)
			continue
		}
		groups = append(groups, Group{Prios: []int8{int8(p)}, Floor: f[p]})
		lo, hi = t, t
	}
	return groups
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
