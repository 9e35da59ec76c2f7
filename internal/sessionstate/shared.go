package sessionstate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/shardq/shardq/internal/signal"
)

// SharedAge bounds how old a read of signal cells shared by a client's watch
// (internal/wakewatch) may be for a consumer to take it for its own: twice the watch's
// interval. A consumer that finds none that fresh reads its own. (A read of the buckets a
// lap before now's does not age: their cells no longer change.)
const SharedAge = 500 * time.Millisecond

// cellsRead is one shared read of a ring's signal cells.
type cellsRead struct {
	sent     time.Time // by the monotonic clock, for its age
	from, to int64
	cells    map[signal.Cell]uuid.UUID
}

// sweepRead is one shared read of a ring's slots, for sweeps.
type sweepRead struct {
	at       time.Time // by the watch's clock, when it was sent: the sweep's time
	from, to int64
	slots    map[signal.Cell]signal.Slots
	touched  map[signal.Entry]time.Time
}

// shared holds the reads of signal cells a client's watch made for every ring it serves,
// the latest per ring and kind.
type shared struct {
	mu        sync.Mutex
	cells     map[string]cellsRead // by ring: its latest read of now's buckets
	lookbacks map[string]cellsRead // by ring: its latest read of the buckets a lap before now's
	sweeps    map[string]sweepRead
}

// ShareCells records a read of the cells of rings' buckets from..to sent at sent (by the
// monotonic clock), for consumers of this State to take (SharedCells).
func (s *State) ShareCells(rings []string, from, to int64, sent time.Time, cells map[signal.Cell]uuid.UUID) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.cells == nil {
		s.shared.cells = map[string]cellsRead{}
	}
	for r, read := range split(rings, from, to, sent, cells) {
		s.shared.cells[r] = read
	}
}

// ShareLookback records a read of the cells of rings' buckets from..to, a lap before now's
// bucket, whose cells no longer change (SharedLookback).
func (s *State) ShareLookback(rings []string, from, to int64, cells map[signal.Cell]uuid.UUID) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.lookbacks == nil {
		s.shared.lookbacks = map[string]cellsRead{}
	}
	for r, read := range split(rings, from, to, time.Now(), cells) {
		s.shared.lookbacks[r] = read
	}
}

// split files cells by ring.
func split(rings []string, from, to int64, sent time.Time, cells map[signal.Cell]uuid.UUID) map[string]cellsRead {
	byRing := make(map[string]cellsRead, len(rings))
	for _, r := range rings {
		byRing[r] = cellsRead{sent: sent, from: from, to: to, cells: map[signal.Cell]uuid.UUID{}}
	}
	for c, v := range cells {
		if r, ok := byRing[c.Queue]; ok {
			r.cells[c] = v
		}
	}
	return byRing
}

// SharedCells returns the cells of ring's buckets from..to from a read the watch shared
// within SharedAge, and how long ago that read was sent; false when there is none.
func (s *State) SharedCells(ring string, from, to int64) (map[signal.Cell]uuid.UUID, time.Duration, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	r, ok := s.shared.cells[ring]
	age := time.Since(r.sent)
	if !ok || age > SharedAge {
		return nil, 0, false
	}
	cells, ok := r.within(from, to)
	return cells, age, ok
}

// SharedLookback returns the cells of ring's buckets from..to, a lap before now's, from
// the last such read the watch shared, and false when it did not cover them.
func (s *State) SharedLookback(ring string, from, to int64) (map[signal.Cell]uuid.UUID, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	r, ok := s.shared.lookbacks[ring]
	if !ok {
		return nil, false
	}
	return r.within(from, to)
}

// within returns r's cells of buckets from..to, if r covered them.
func (r cellsRead) within(from, to int64) (map[signal.Cell]uuid.UUID, bool) {
	if from < r.from || to > r.to {
		return nil, false
	}
	out := make(map[signal.Cell]uuid.UUID, len(r.cells))
	for c, v := range r.cells {
		if c.Bucket >= from && c.Bucket <= to {
			out[c] = v
		}
	}
	return out, true
}

// ShareSweep records a read, sent at at by the watch's clock, of the slots of rings'
// buckets from..to and when each was touched, for consumers' sweeps (SharedSweep).
func (s *State) ShareSweep(rings []string, from, to int64, at time.Time, slots map[signal.Cell]signal.Slots, touched map[signal.Entry]time.Time) {
	byRing := make(map[string]*sweepRead, len(rings))
	for _, r := range rings {
		byRing[r] = &sweepRead{at: at, from: from, to: to, slots: map[signal.Cell]signal.Slots{}, touched: map[signal.Entry]time.Time{}}
	}
	for c, v := range slots {
		if r, ok := byRing[c.Queue]; ok {
			r.slots[c] = v
		}
	}
	for e, t := range touched {
		if r, ok := byRing[e.Queue]; ok {
			r.touched[e] = t
		}
	}
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.sweeps == nil {
		s.shared.sweeps = map[string]sweepRead{}
	}
	for ring, r := range byRing {
		s.shared.sweeps[ring] = *r
	}
}

// SharedSweep returns the latest shared read of ring's slots covering buckets from..to,
// and when it was sent, if it was sent after after.
func (s *State) SharedSweep(ring string, from, to int64, after time.Time) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, time.Time, bool) {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	r, ok := s.shared.sweeps[ring]
	if !ok || r.from > from || r.to < to || !r.at.After(after) {
		return nil, nil, time.Time{}, false
	}
	slots := make(map[signal.Cell]signal.Slots, len(r.slots))
	for c, v := range r.slots {
		if c.Bucket >= from && c.Bucket <= to {
			slots[c] = v
		}
	}
	touched := make(map[signal.Entry]time.Time, len(r.touched))
	for e, t := range r.touched {
		if e.Bucket >= from && e.Bucket <= to {
			touched[e] = t
		}
	}
	return slots, touched, r.at, true
}

// KeptNamesAge is how old a list of a queue's series KeptNames returns may be: half the
// interval at which workers keep their series (worker.DefaultSeriesInterval).
const KeptNamesAge = 15 * time.Second

// keptNames are the series names of the queues whose series are kept on this State.
type keptNames struct {
	mu     sync.Mutex
	queues map[string]namesRead
}

type namesRead struct {
	sent  time.Time
	names []string
}

// KeptNames lists queue's series for series keeping (internal/series.Env.Keep), as read at
// most KeptNamesAge ago: one read lists those of every queue kept on this State, so a
// client keeping the series of many queues reads their names once per that age, not once
// per queue. A series created since is kept at the next round.
func (s *State) KeptNames(ctx context.Context, queue string) ([]string, error) {
	s.kept.mu.Lock()
	if s.kept.queues == nil {
		s.kept.queues = map[string]namesRead{}
	}
	if r, ok := s.kept.queues[queue]; ok && time.Since(r.sent) < KeptNamesAge {
		s.kept.mu.Unlock()
		return r.names, nil
	}
	queues := []string{queue}
	for _, q := range slices.Sorted(maps.Keys(s.kept.queues)) {
		if q != queue {
			queues = append(queues, q)
		}
	}
	s.kept.mu.Unlock()
	sent := time.Now()
	names, err := s.Store.Series().NamesOf(ctx, queues)
	if err != nil {
		return nil, fmt.Errorf("sessionstate: listing the series of %d queue(s): %w", len(queues), err)
	}
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	for _, q := range queues {
		s.kept.queues[q] = namesRead{sent: sent, names: names[q]}
	}
	return names[queue], nil
}
