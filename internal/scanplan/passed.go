package scanplan

import (
	"math"
	"time"

	"github.com/shardq/shardq/shard"
)

// Pass marks: how a consumer starting afresh skips the partitions nothing was written to.
//
// A partition of the current lap may hold rows of its own bucket, of the bucket a lap
// before, and of any lap before that. The signal cells rule out the first two when they
// show no touch; a plan that read the partition from its floors once rules out the rest
// (quietLap). A plan just made has read nothing, so without more it reads every
// partition of the lap: about three requests each, 960 partitions a queue by default.
//
// A shard's cursor passes a bucket only once its partition held nothing of the bucket's
// lap or an earlier one, but for a cursor that lags its candidates by a lap: it jumps to
// the first of them not finished, which may still hold the rows of the buckets jumped.
// So a plan whose cursor passed a whole lap of candidates from where it began (or last
// lapped), or began where a mark like it left off, knows that every bucket of a shard
// below its cursor held nothing when passed, and none below a visible row it found:
// its pass mark. Consumers store their pass marks (MarkDue), and a plan starts from the
// freshest stored one (StartPassed), or from the queue's creation, when recent: no row
// lies before it. A current partition whose bucket two laps before lies below its
// shard's mark, and whose cells of this lap and the lap before show no touch, holds
// nothing, and is not read.
//
// A row written into a bucket after a mark passed it is late; its touch shows in that
// bucket's cell, which a starting plan reads when the bucket is of the current lap or the
// lap before. A mark is trusted for MarkLife (three quarters of a lap) and stored every
// half lap, so a late row is covered for as long as its write trailed its bucket by less
// than a lap less a bucket: a sweep that finds one lowers the mark too (Late).

// noMark is a shard's mark when nothing is known.
const noMark = math.MinInt64

// MarkLife is how long after it was made a stored pass mark of layout's ring is trusted.
func MarkLife(layout shard.Layout) time.Duration { return layout.Lap() * 3 / 4 }

// markEvery is how often a plan stores its pass mark.
func (p *Plan) markEvery() time.Duration { return p.cfg.Layout.Lap() / 2 }

// StartPassed starts the plan's pass marks from what is known at now: the mark stored
// for its ring (per shard, a bucket; made at storedAt; nil when none could be read) when
// it is younger than MarkLife (and not from a clock ahead by more than the skew), and
// createdBelow, a bucket no row lies below (the queue's creation; math.MinInt64 when
// unknown).
func (p *Plan) StartPassed(stored map[int]int64, storedAt time.Time, createdBelow int64, now time.Time) {
	age := now.Sub(storedAt)
	fresh := stored != nil && age < MarkLife(p.cfg.Layout) && age > -p.cfg.Skew
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.passed {
		m := createdBelow
		if b, ok := stored[s]; ok && fresh && b > m {
			m = b
		}
		p.passed[s] = max(p.passed[s], m)
	}
	p.raisePassed()
}

// holdPassed keeps each shard's mark at or below what parts, as a call at now read
// them, show is not passed: a shard whose cursor lags its candidates by a lap or more
// (Lapped) skips buckets whose partitions it has yet to drain, so its mark stays at the
// cursor until it passes a whole lap again from there; and a visible row found (Oldest)
// holds the mark at its bucket until the cursor passes its partition. Callers hold p.mu.
func (p *Plan) holdPassed(parts []Part, now time.Time) {
	lapStart := p.lapStart(now)
	for s, c := range p.cursors {
		if c < lapStart {
			p.passed[s] = min(p.passed[s], c)
			p.starts[s] = lapStart
		}
	}
	for _, pt := range parts {
		if pt.Finished || pt.Oldest.IsZero() {
			continue
		}
		if b := p.cfg.Layout.Bucket(pt.Oldest); b < p.passed[pt.Shard] {
			// Rejoin the cursor only once it passed pt, which then held nothing.
			p.passed[pt.Shard] = b
			p.starts[pt.Shard] = max(p.starts[pt.Shard], pt.Bucket-int64(p.cfg.Layout.BucketCount)+1)
		}
	}
}

// raisePassed moves each shard's mark up to its cursor where the two join: the mark
// reaches where the shard's cursor began, or the cursor passed a whole lap from there.
// Callers hold p.mu.
func (p *Plan) raisePassed() {
	for s, c := range p.cursors {
		if p.passed[s] >= p.starts[s] || c >= p.starts[s]+int64(p.cfg.Layout.BucketCount) {
			p.passed[s] = max(p.passed[s], c)
		}
	}
}

// covered reports whether pt's shard's mark lies above its bucket two laps before: the
// partition held no row of that lap or an earlier one.
func (p *Plan) covered(pt *Part) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return pt.Bucket-2*int64(p.cfg.Layout.BucketCount) < p.passed[pt.Shard]
}

// MarkDue returns the pass mark to store at now, per shard with one, when a half lap
// passed since the last was stored (or none was) and it moved since.
func (p *Plan) MarkDue(now time.Time) (map[int]int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.markedAt.IsZero() && now.Before(p.markedAt.Add(p.markEvery())) {
		return nil, false
	}
	mark := map[int]int64{}
	moved := false
	for s, b := range p.passed {
		if b == noMark {
			continue
		}
		mark[s] = b
		moved = moved || b != p.marked[s]
	}
	return mark, moved
}

// Marked records that mark, returned by MarkDue at now, was stored (nil: storing it
// failed), so the next is due half a lap later.
func (p *Plan) Marked(mark map[int]int64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.markedAt = now
	for s, b := range mark {
		p.marked[s] = b
	}
}
