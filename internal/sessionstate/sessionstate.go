// Package sessionstate holds what every producer, consumer, worker, series client and
// inspector on one driver (one session) shares: the store of its keyspace's tables, the
// cluster's clock, the toucher of wake-up signals, the in-process wake-up bus and the
// cache of queue settings. The driver keeps it (driver.Driver.State). A session is bound
// to one keyspace, so sharing per session keeps two keyspaces apart; parts made on the
// same driver share one measure of the clock, one coalescing of touches and one read of
// each queue's settings.
package sessionstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/shardq/shardq/internal/driver"

	"github.com/shardq/shardq/internal/clustertime"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// State is one session's shared state. Safe for concurrent use.
type State struct {
	// Store reads and writes the session keyspace's tables.
	Store store.Store
	// Cluster is the cluster's clock, the default clock of every part.
	Cluster *clustertime.Clock
	// Signals touches wake-up signal cells after writes.
	Signals *signal.Toucher
	// Bus wakes idle workers of this session when a producer of it writes.
	Bus *wakeup.Bus

	log       *lateLog
	announcer *signal.Announcer
	shared    shared
	kept      keptNames

	queues sync.Map // name -> shardqtype.QueueConfig

	pausedMu sync.Mutex
	paused   map[string]pauseRead
}

// pauseRead is what a read of a queue's status (whether it is paused, its layouts)
// found, and when it was sent.
type pauseRead struct {
	paused    bool
	layouts   layouts.History
	createdAt time.Time // by the coordinator that created the queue; zero if not stored
	at        time.Time
}

// New returns the State of parts working on tables, whose host clock is host (nil: the
// system's). log is as For's.
func New(tables store.Store, host clustertime.Host, log *slog.Logger) *State {
	late := newLateLog(log)
	s := &State{
		Cluster: clustertime.New(tables, host, slog.New(late)),
		Signals: signal.NewToucher(tables.Signals(), slog.New(late)),
		Bus:     &wakeup.Bus{},
		log:     late,
		paused:  map[string]pauseRead{},
	}
	s.announcer = signal.NewAnnouncer(tables.Signals(), s.Cluster.Now)
	s.Store = store.Announced(tables, s.announce)
	return s
}

// announce touches the signal cells of rows about to be written that this State has not
// touched yet (signal.Announcer).
func (s *State) announce(ctx context.Context, rows []taskrow.Row) error {
	if len(rows) == 0 {
		return nil
	}
	type place struct {
		l          shard.Layout
		tshard, cs int
	}
	places := map[string]place{}
	var ts signal.Touches
	for _, r := range rows {
		pl, ok := places[r.Key]
		if !ok {
			l, err := s.layoutOfKey(ctx, r.Key)
			if err != nil {
				return err
			}
			_, tshard, cs, err := shard.ParseKey(r.Key)
			if err != nil {
				return err
			}
			pl = place{l, tshard, cs}
			places[r.Key] = pl
		}
		id, taskID := r.ID, r.TaskID
		if pl.l.TimeShard(pl.l.Bucket(shard.IDTime(id))) != pl.tshard || pl.l.ShardFor(taskID) != pl.cs {
			return fmt.Errorf("sessionstate: row %s of task %s does not belong at %s", id, taskID, r.Key)
		}
		ts.Add(pl.l, id, taskID)
	}
	return s.announcer.Announce(ctx, &ts)
}

// layoutOfKey returns the layout whose ring holds partition key, reading its queue's
// settings and layout history when they are not known: a cell announced under a wrong
// layout would be no proof at all.
func (s *State) layoutOfKey(ctx context.Context, key string) (shard.Layout, error) {
	ring, _, _ := strings.Cut(key, ":")
	name, g, ok := shard.ParseRing(ring)
	if !ok {
		return shard.Layout{}, fmt.Errorf("sessionstate: %q names no queue's ring", key)
	}
	q, err := s.Queue(ctx, name)
	if err != nil {
		return shard.Layout{}, err
	}
	l := q.Layout()
	if g > 0 {
		h, err := s.Layouts(ctx, name)
		if err != nil {
			return shard.Layout{}, err
		}
		if g >= len(h.Gens) {
			return shard.Layout{}, fmt.Errorf("sessionstate: %q names a layout of queue %q not in its history", key, name)
		}
		l = h.Gens[g].Layout
	}
	return l, nil
}

// For returns d's State, made on first use unless Bind gave one. log receives the
// warnings of the shared parts that work in the background (a late touch, a failed clock
// measure): the first logger any part asks with; until one does, they are discarded.
func For(d *driver.Driver, log *slog.Logger) *State {
	st := d.State(func() any { return New(store.Of(d.Session()), nil, log) }).(*State)
	st.log.set(log)
	return st
}

// Bind makes st the State of d, which must have none yet, so that the public
// constructors, which take a Driver, build parts on st's store: the simulator binds a
// Driver without a session per simulated process to a store of its own.
func Bind(d *driver.Driver, st *State) { d.SetState(st) }

// ClusterFor is the cluster's clock for a part configured with clock: clock itself when it
// is one (tests measure a skewed host's), else the session's.
func (s *State) ClusterFor(clock shardqtype.Clock) *clustertime.Clock {
	if c, ok := clock.(*clustertime.Clock); ok {
		return c
	}
	return s.Cluster
}

// Queue returns queue name's stored settings, read once per session. Settings do not
// change once a queue is created (CreateQueue refuses other ones).
func (s *State) Queue(ctx context.Context, name string) (shardqtype.QueueConfig, error) {
	if q, ok := s.queues.Load(name); ok {
		return q.(shardqtype.QueueConfig), nil
	}
	if !shard.ValidQueueName(name) {
		return shardqtype.QueueConfig{}, defaults.Invalid("queue name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", name)
	}
	// As shardq.LoadQueue, but through the State's store.
	stored, err := s.Store.Queues().Get(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return shardqtype.QueueConfig{}, fmt.Errorf("%w: %q", shardqtype.ErrQueueNotFound, name)
	}
	if err != nil {
		return shardqtype.QueueConfig{}, fmt.Errorf("shardq: loading queue %q: %w", name, err)
	}
	q := shardqtype.QueueConfig(stored)
	s.queues.Store(name, q)
	return q, nil
}

// Paused reports whether queue name is paused, as read at most shardqtype.SettingsRefresh
// ago (timed from when the read was sent): the parts of one session share one read per
// queue and interval. No lock is held across the read.
func (s *State) Paused(ctx context.Context, name string) (bool, error) {
	st, err := s.status(ctx, name)
	return st.paused, err
}

// Layouts returns queue name's layout history, as read at most shardqtype.SettingsRefresh ago
// (timed from when the read was sent), in the same read as Paused: every producer and
// consumer that writes calls it first, so each writes under a history at most that old,
// which shardq.ChangeLayout counts on.
func (s *State) Layouts(ctx context.Context, name string) (layouts.History, error) {
	st, err := s.status(ctx, name)
	return st.layouts, err
}

// CreatedAt returns when queue name was created, by the clock of the node that created
// it, in the same read as Paused; zero when it is not stored.
func (s *State) CreatedAt(ctx context.Context, name string) (time.Time, error) {
	st, err := s.status(ctx, name)
	return st.createdAt, err
}

// Place returns the layout a row of queue q visible at t goes under when written at now
// (layouts.History.Place), by the history last read by Layouts or Paused: callers read it
// first, and place by it without a read per row.
func (s *State) Place(q shardqtype.QueueConfig, t, now time.Time) shard.Layout {
	s.pausedMu.Lock()
	last, ok := s.paused[q.Name]
	s.pausedMu.Unlock()
	if !ok {
		return q.Layout()
	}
	return last.layouts.Place(t, now)
}

// Fixed returns the layout of a row of queue q whose place its ID's time t fixes
// (layouts.History.Fixed), by a history read at most shardqtype.SettingsRefresh ago.
func (s *State) Fixed(ctx context.Context, q shardqtype.QueueConfig, t time.Time) (shard.Layout, error) {
	h, err := s.Layouts(ctx, q.Name)
	if err != nil {
		return shard.Layout{}, err
	}
	return h.Fixed(t), nil
}

// LongestLap returns the longest lap of queue q's live layouts
// (layouts.History.LongestLap), by the history last read; q's first layout's when none
// was read.
func (s *State) LongestLap(q shardqtype.QueueConfig) time.Duration {
	s.pausedMu.Lock()
	last, ok := s.paused[q.Name]
	s.pausedMu.Unlock()
	if !ok {
		return q.Layout().Lap()
	}
	return last.layouts.LongestLap()
}

// LayoutOf returns the layout of queue q whose ring holds partition key, by the history
// last read; q's first layout when the key names no generation it knows.
func (s *State) LayoutOf(q shardqtype.QueueConfig, key string) shard.Layout {
	ring, _, _ := strings.Cut(key, ":")
	_, g, ok := shard.ParseRing(ring)
	s.pausedMu.Lock()
	last, known := s.paused[q.Name]
	s.pausedMu.Unlock()
	if !ok || !known || g >= len(last.layouts.Gens) {
		return q.Layout()
	}
	return last.layouts.Gens[g].Layout
}

// Refresh reads the status of the queues named in one request when one of them was read
// half shardqtype.SettingsRefresh ago or longer, so that a part working many queues (a
// client's watch of their signals) keeps every one fresh, for Paused and Layouts, at the
// price of one read. A queue it cannot read is left to those calls' own reads.
func (s *State) Refresh(ctx context.Context, names []string) error {
	s.pausedMu.Lock()
	stale := false
	for _, name := range names {
		if last, ok := s.paused[name]; !ok || time.Since(last.at) >= shardqtype.SettingsRefresh/2 {
			stale = true
			break
		}
	}
	s.pausedMu.Unlock()
	if !stale {
		return nil
	}
	sent := time.Now()
	sts, err := s.Store.Queues().StatusesOf(ctx, names)
	if err != nil {
		return fmt.Errorf("shardq: reading the state of queues %v: %w", names, err)
	}
	for name, st := range sts {
		q, err := s.Queue(ctx, name)
		if err != nil {
			continue
		}
		h, err := layouts.Decode(q.Layout(), st.Layouts)
		if err != nil {
			continue
		}
		s.keep(name, pauseRead{paused: st.Paused, layouts: h, createdAt: st.CreatedAt, at: sent})
	}
	return nil
}

// keep caches read as queue name's status, unless a read sent later is cached already.
func (s *State) keep(name string, read pauseRead) {
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	if cur, ok := s.paused[name]; !ok || cur.at.Before(read.at) {
		s.paused[name] = read
	}
}

// status reads queue name's status at most shardqtype.SettingsRefresh ago.
func (s *State) status(ctx context.Context, name string) (pauseRead, error) {
	s.pausedMu.Lock()
	last, ok := s.paused[name]
	s.pausedMu.Unlock()
	if ok && time.Since(last.at) < shardqtype.SettingsRefresh {
		return last, nil
	}
	q, err := s.Queue(ctx, name)
	if err != nil {
		return pauseRead{}, err
	}
	sent := time.Now()
	st, err := s.Store.Queues().Status(ctx, name, false)
	if errors.Is(err, store.ErrNotFound) {
		return pauseRead{}, fmt.Errorf("%w: %q", shardqtype.ErrQueueNotFound, name)
	}
	if err != nil {
		return pauseRead{}, fmt.Errorf("shardq: reading the state of queue %q: %w", name, err)
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return pauseRead{}, err
	}
	read := pauseRead{paused: st.Paused, layouts: h, createdAt: st.CreatedAt, at: sent}
	s.keep(name, read)
	return read, nil
}
