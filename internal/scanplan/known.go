package scanplan

import (
	"slices"
	"time"

	"github.com/google/uuid"
)

// KnowAhead is how far past now a busy consumer's peek of a partition of the current
// bucket reads, to know the rows coming due in it (Know): as long as that partition's
// signal cell is not touched again and KnowAhead has not passed, the next calls count its
// due rows from what that peek saw instead of peeking again (Known). A row whose writer
// died before its touch applied is found by the next peek, at most KnowAhead later.
const KnowAhead = time.Second

// known is what a peek of a partition saw of its rows due and coming due.
type known struct {
	times []time.Time // when the rows seen, not yet taken, become visible; ascending
	until time.Time   // every row of the partition visible by until was seen
	cell  uuid.UUID   // the partition's signal cell as read before that peek; zero if untouched
}

// due is how many of the rows seen are visible at now.
func (k *known) due(now time.Time) int {
	n := 0
	for n < len(k.times) && !k.times[n].After(now) {
		n++
	}
	return n
}

// value is pt's signal cell in cells, zero if untouched.
func (cells Cells) value(pt *Part) uuid.UUID { return cells[pt.cell()] }

// Known prepares the parts among current, indexes into parts, of the bucket of now for a
// busy call, and returns the indexes left to peek. A dense partition (Dense) is taken
// without a peek: it is Blind and assumed to hold PeekLimit rows, as a hot one, and the
// take reads what is due. Another whose last peek's record still holds (cells, read before
// this call's peeks, show no touch of it since that peek, and now is not past the
// record's end) gets Avail (and Next) from it. With cells nil (not read), only dense
// partitions are not peeked.
func (p *Plan) Known(parts []Part, current []int, now time.Time, cells Cells) (peek []int) {
	bNow := p.cfg.Layout.Bucket(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, i := range current {
		pt := &parts[i]
		if pt.Bucket != bNow || pt.Avail > 0 {
			peek = append(peek, i)
			continue
		}
		if p.dense[pt.pkey()] {
			// Next: a call that finds none after all, taking everything, is followed by an
			// idle one at once, which reads ahead for when the next row comes due.
			pt.Avail, pt.Blind, pt.Next = PeekLimit, true, now
			continue
		}
		k, ok := p.known[pt.pkey()]
		switch {
		case !ok || cells == nil:
			peek = append(peek, i)
			continue
		case cells.value(pt) != k.cell || now.After(k.until):
			delete(p.known, pt.pkey())
			peek = append(peek, i)
			continue
		}
		n := k.due(now)
		pt.Avail = n
		if n < len(k.times) {
			pt.Next = k.times[n]
		}
	}
	return peek
}

// Know records what a peek of pt, sent at now and reading every row visible by until (it
// was not cut), saw: when each row becomes visible (times, in any order; those due at
// now stay until a take consumes them, Consumed), with pt's signal cell as
// cells held before the peek. Only partitions of the bucket of now are recorded.
func (p *Plan) Know(pt *Part, now, until time.Time, times []time.Time, cells Cells) {
	if cells == nil || pt.Bucket != p.cfg.Layout.Bucket(now) {
		return
	}
	times = slices.Clone(times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known[pt.pkey()] = &known{times: times, until: until, cell: cells.value(pt)}
}

// Consumed records that a take of pt took every row of it visible at now (its read was
// not cut and its swap applied, or it found none): those are no longer coming due.
func (p *Plan) Consumed(pt *Part, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, ok := p.known[pt.pkey()]
	if !ok {
		return
	}
	k.times = k.times[k.due(now):]
}

// Dense records whether pt is busy: a take of it read a tenth of PeekLimit due rows or
// more, or a peek of it that read KnowAhead ahead was cut. Busy calls take such a
// partition of the current bucket without peeking it first (Known): each finds rows come
// due in it since the last, and every read of it walks the tombstones of the rows taken
// over the last MaxClockSkew, below which its floors cannot rise, so a peek before each
// take doubled that walk. A take that reads fewer makes it quiet again.
func (p *Plan) Dense(pt *Part, dense bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if dense {
		p.dense[pt.pkey()] = true
	} else {
		delete(p.dense, pt.pkey())
	}
}

// ForgetAll drops what every peek saw coming due: rows were written that the signal cells
// may not show yet.
func (p *Plan) ForgetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.known)
}

// Forget drops what pt's last peek saw coming due: a take of it was cut, failed or did
// not apply, so the next call peeks it again.
func (p *Plan) Forget(pt *Part) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, pt.pkey())
}

// WantsCells reports whether a busy call at now should read the signal cells: some
// partition of the bucket of now among parts has its rows coming due recorded, or is not
// dense, so that its peek may read ahead and record them.
func (p *Plan) WantsCells(parts []Part, now time.Time) bool {
	bNow := p.cfg.Layout.Bucket(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pt := range parts {
		if pt.Bucket == bNow && !pt.Ahead && (p.known[pt.pkey()] != nil || !p.dense[pt.pkey()]) {
			return true
		}
	}
	return false
}
