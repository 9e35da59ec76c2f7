// Package signal tells idle workers in other processes that tasks were written. A
// producer touches one cell per (queue, bucket, concurrency shard) it wrote into, after
// the write; an idle worker reads the few rows of the buckets coming due a few times a
// second, which costs one small read, and fetches when a cell changed.
package signal

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/shard"
)

// Cell is one signal cell: a queue's bucket and concurrency shard.
type Cell struct {
	Queue  string
	Bucket int64
	Shard  int
}

const (
	touchStmt = `UPDATE queue_signals SET shards = shards + ? WHERE queue = ? AND bucket = ?`
	readStmt  = `SELECT bucket, shards FROM queue_signals WHERE queue = ? AND bucket >= ? AND bucket <= ?`
)

// Coalesce is how long after a touch of a cell further touches of it are gathered into
// one, written at the end of that time.
const Coalesce = 20 * time.Millisecond

// Toucher touches cells for one producer. A cell not touched in the last Coalesce is
// touched at once, before Touch returns, so a process that schedules one task and exits
// still wakes workers; touches that follow within Coalesce are written together in the
// background at its end, so a busy producer adds at most one small write per cell each
// Coalesce.
type Toucher struct {
	session *gocql.Session
	log     *slog.Logger

	mu       sync.Mutex
	last     map[Cell]time.Time // when each cell's last touch was sent
	pending  map[Cell]struct{}
	deferred bool // a background touch of pending is scheduled
}

// NewToucher returns a Toucher writing through session.
func NewToucher(session *gocql.Session, log *slog.Logger) *Toucher {
	return &Toucher{session: session, log: log, last: map[Cell]time.Time{}, pending: map[Cell]struct{}{}}
}

// Touch records that tasks were written into cells. Call it after the write completed.
func (t *Toucher) Touch(ctx context.Context, cells []Cell) error {
	now := time.Now()
	var direct []Cell
	t.mu.Lock()
	for _, c := range cells {
		if now.Sub(t.last[c]) >= Coalesce {
			t.last[c] = now
			direct = append(direct, c)
			continue
		}
		t.pending[c] = struct{}{}
		if !t.deferred {
			t.deferred = true
			time.AfterFunc(Coalesce, t.flush)
		}
	}
	for c, at := range t.last { // forget cells of buckets long gone
		if now.Sub(at) > time.Minute {
			delete(t.last, c)
		}
	}
	t.mu.Unlock()
	return write(ctx, t.session, direct)
}

func (t *Toucher) flush() {
	t.mu.Lock()
	cells := make([]Cell, 0, len(t.pending))
	now := time.Now()
	for c := range t.pending {
		cells = append(cells, c)
		t.last[c] = now
	}
	clear(t.pending)
	t.deferred = false
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := write(ctx, t.session, cells); err != nil {
		t.log.WarnContext(ctx, "touching wake-up signals; idle workers find the tasks at their next poll", "error", err)
	}
}

// write touches cells, one statement per queue and bucket.
func write(ctx context.Context, session *gocql.Session, cells []Cell) error {
	type row struct {
		queue  string
		bucket int64
	}
	rows := map[row]map[int]gocql.UUID{}
	for _, c := range cells {
		r := row{c.Queue, c.Bucket}
		if rows[r] == nil {
			rows[r] = map[int]gocql.UUID{}
		}
		rows[r][c.Shard] = gocql.TimeUUID()
	}
	for r, shards := range rows {
		if err := session.Query(touchStmt, shards, r.queue, r.bucket).WithContext(ctx).Exec(); err != nil {
			return fmt.Errorf("signal: touching %s bucket %d: %w", r.queue, r.bucket, err)
		}
	}
	return nil
}

// Watcher notices touches of one queue's cells.
type Watcher struct {
	session *gocql.Session
	queue   string
	seen    map[Cell]gocql.UUID
}

// NewWatcher returns a Watcher of queue.
func NewWatcher(session *gocql.Session, queue string) *Watcher {
	return &Watcher{session: session, queue: queue, seen: map[Cell]gocql.UUID{}}
}

// Changed reads the cells of buckets from..to and reports whether one was touched since
// it was last read and at or after since: the time the caller last looked for tasks,
// less the clock skew it allows between processes. A touch before since concerns tasks
// that look already saw.
func (w *Watcher) Changed(ctx context.Context, from, to int64, since time.Time) (bool, error) {
	iter := w.session.Query(readStmt, w.queue, from, to).WithContext(ctx).Iter()
	var bucket int64
	var shards map[int]gocql.UUID
	changed := false
	for iter.Scan(&bucket, &shards) {
		for s, v := range shards {
			c := Cell{Queue: w.queue, Bucket: bucket, Shard: s}
			if w.seen[c] != v && !shard.IDTime(uuid.UUID(v)).Before(since) {
				changed = true
			}
			w.seen[c] = v
		}
		shards = nil
	}
	if err := iter.Close(); err != nil {
		return false, fmt.Errorf("signal: reading %s: %w", w.queue, err)
	}
	for c := range w.seen {
		if c.Bucket < from {
			delete(w.seen, c)
		}
	}
	return changed, nil
}
