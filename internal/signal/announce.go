package signal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CellLife is how long a cell outlives the end of its bucket: its row's time to live past
// that end (Row.TTL). A cell read after that may have been touched and expired.
const CellLife = 24 * time.Hour

// ErrNotAnnounced means rows were not written because their cells could not be announced
// (see Announcer): a definite failure, which writing again may cure.
var ErrNotAnnounced = errors.New("signal: the rows' cells could not be touched first; the rows were not written")

// Announcer touches a cell before the first row a process writes into it (an announce),
// so that a cell no touch reached proves its partition holds no row of its bucket: the
// touch after a write may never apply (its writer died first), but the write is not sent
// before its announce applied. Consumers lean on that proof to skip partitions whose
// cells show nothing (scanplan.Plan.IdleReads). One write per process, cell and bucket;
// cells are forgotten once their bucket has ended, and are announced again if rows come
// after that. Safe for concurrent use.
type Announcer struct {
	cells Writer
	now   func() time.Time

	mu    sync.Mutex
	known map[Cell]time.Time // cells announced, each with its bucket's end
	prune time.Time          // when known was last pruned
}

// NewAnnouncer returns an Announcer writing through cells, whose now tells when a bucket
// has ended.
func NewAnnouncer(cells Writer, now func() time.Time) *Announcer {
	return &Announcer{cells: cells, now: now, known: map[Cell]time.Time{}}
}

// Announce touches the cells of ts that this process has not announced, and returns once
// they applied; an error means some may not have, and the rows must not be written.
func (a *Announcer) Announce(ctx context.Context, ts *Touches) error {
	var need []Touch
	a.mu.Lock()
	for _, t := range ts.list {
		if _, ok := a.known[t.Cell]; !ok {
			need = append(need, t)
		}
	}
	a.mu.Unlock()
	if len(need) == 0 {
		return nil
	}
	if err := a.cells.Touch(ctx, need); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAnnounced, err)
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range need {
		a.known[t.Cell] = t.Until
	}
	if now.Sub(a.prune) >= time.Minute {
		a.prune = now
		for c, until := range a.known {
			// A row comes into a bucket after its end only from a writer whose clock
			// trails; announcing its cell again costs one write.
			if now.Sub(until) > time.Minute {
				delete(a.known, c)
			}
		}
	}
	return nil
}
