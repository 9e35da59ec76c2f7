package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/internal/deadletters"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/shard"
)

// Cassandra returns the Store of session's keyspace.
func Cassandra(session *gocql.Session) Store { return cassandra{session} }

type cassandra struct{ session *gocql.Session }

func (c cassandra) Tasks() Tasks             { return tasks(c) }
func (c cassandra) Leasing() Leasing         { return leasing(c) }
func (c cassandra) Locks() Locks             { return locks(c) }
func (c cassandra) Keys() Keys               { return keys(c) }
func (c cassandra) Queues() Queues           { return queues(c) }
func (c cassandra) Index() Index             { return index(c) }
func (c cassandra) DeadLetters() DeadLetters { return letters(c) }
func (c cassandra) Signals() Signals         { return signals(c) }
func (c cassandra) Series() Series           { return series(c) }
func (c cassandra) Scans() Scans             { return scans(c) }

func (c cassandra) Now(ctx context.Context) (time.Time, string, error) {
	var id gocql.UUID
	iter := cql.Query(c.session, `SELECT now() FROM system.local`).WithContext(ctx).Iter()
	scanned := iter.Scan(&id)
	if err := iter.Close(); err != nil {
		return time.Time{}, "", err
	}
	if !scanned {
		return time.Time{}, "", ErrNotFound
	}
	node := ""
	if h := iter.Host(); h != nil {
		node = h.HostID()
	}
	return shard.IDTime(uuid.UUID(id)), node, nil
}

// The task rows, task index, dead letters and signal cells keep their statement text and
// row codecs in their own packages (taskrow, taskindex, deadletters, signal); outside
// tests and the bench's raw ceiling, only the store runs them.

type index struct{ session *gocql.Session }

func (x index) Write(ctx context.Context, ws []taskindex.Write, inflight int) ([]int, error) {
	return taskindex.Apply(ctx, x.session, ws, inflight)
}

func (x index) Read(ctx context.Context, id uuid.UUID) (taskindex.Entry, int64, error) {
	return taskindex.Read(ctx, x.session, id)
}

type letters struct{ session *gocql.Session }

func (d letters) Write(ctx context.Context, l deadletters.Letter) error {
	return deadletters.Write(ctx, d.session, l)
}

func (d letters) Page(ctx context.Context, queue string, now time.Time, after uuid.UUID, limit int) ([]deadletters.Letter, error) {
	return deadletters.Page(ctx, d.session, queue, now, after, limit)
}

func (d letters) Get(ctx context.Context, queue string, id uuid.UUID) (deadletters.Letter, bool, error) {
	return deadletters.Get(ctx, d.session, queue, id)
}

func (d letters) Delete(ctx context.Context, queue string, id uuid.UUID, stamp int64) error {
	return deadletters.Delete(ctx, d.session, queue, id, stamp)
}

func (d letters) Count(ctx context.Context, queue string, now time.Time, pageSize int, done func()) (int, error) {
	return deadletters.Count(ctx, d.session, queue, now, pageSize, done)
}

type signals struct{ session *gocql.Session }

func (s signals) Touch(ctx context.Context, cells []signal.Touch) error {
	return signal.Write(ctx, s.session, cells)
}

func (s signals) Cells(ctx context.Context, queue string, from, to int64) (map[signal.Cell]gocql.UUID, error) {
	return signal.Cells(ctx, s.session, queue, from, to)
}

func (s signals) CellsOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]gocql.UUID, error) {
	return signal.CellsOf(ctx, s.session, rings, from, to)
}

func (s signals) LastTouches(ctx context.Context, queue string, from, to int64) (map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	return signal.LastTouches(ctx, s.session, queue, from, to)
}

func (s signals) CellsAndTouchesOf(ctx context.Context, rings []string, from, to int64) (map[signal.Cell]gocql.UUID, map[signal.Cell]signal.Slots, map[signal.Entry]time.Time, error) {
	return signal.CellsAndTouchesOf(ctx, s.session, rings, from, to)
}

func (s signals) Passed(ctx context.Context, ring string) (map[int]int64, time.Time, error) {
	var mark map[int]int64
	var at time.Time
	err := cql.Query(s.session, `SELECT buckets, made_at FROM queue_passes WHERE queue = ?`, ring).WithContext(ctx).Scan(&mark, &at)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: reading the pass mark of %s: %w", ring, err)
	}
	return mark, at, nil
}

func (s signals) Pass(ctx context.Context, ring string, mark map[int]int64, madeAt time.Time) error {
	err := cql.Query(s.session, `INSERT INTO queue_passes (queue, buckets, made_at) VALUES (?, ?, ?)`, ring, mark, madeAt).WithContext(ctx).Exec()
	if err != nil {
		return fmt.Errorf("store: writing the pass mark of %s: %w", ring, err)
	}
	return nil
}
