// Package series runs recurring tasks: a series schedules one occurrence at a time, by a
// fixed interval or a cron expression in a time zone, and schedules the next when the
// current one is acked (or taken, if it asks for that).
//
// Exactly one occurrence of a series is outstanding at a time, whatever consumers race or
// crash: the move from one occurrence to the next is a lightweight transaction on the
// series' row, and the occurrence it makes is written at a place and with a write
// timestamp fixed by that row, so writing it again, after a crash, never adds a second
// one. Consumers move a series as they ack its occurrence; the keeper that every worker
// runs (Client.Keep) finds a series whose mover died and moves it within about
// worker.DefaultSeriesInterval.
package series

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/defaults"
	iseries "github.com/shardq/shardq/internal/series"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/taskindex"
	"github.com/shardq/shardq/internal/tasklookup"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// MaxNameBytes is the longest series name.
const MaxNameBytes = 200

var (
	// ErrNotFound means the queue has no series of that name.
	ErrNotFound = iseries.ErrNotFound
	// ErrExists is matched by a *ConflictError.
	ErrExists = errors.New("series: exists with another spec")
)

// ConflictError says that Create found a series of the same name with another spec.
// It matches ErrExists.
type ConflictError struct {
	Queue, Name string
	Existing    Series
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("series: %q of queue %q exists with another spec; use Update to change it", e.Name, e.Queue)
}

func (e *ConflictError) Unwrap() error { return ErrExists }

// Missed says what happens to occurrences whose time passed while the series could not
// run them: its consumers were down, or an occurrence ran past the next one's time.
type Missed int

const (
	// Skip schedules the next occurrence still in the future, dropping the missed ones.
	Skip Missed = iota
	// CatchUp runs one occurrence at once for all the missed ones, then goes on as
	// scheduled.
	CatchUp
)

// Advance says when a series schedules its next occurrence.
type Advance int

const (
	// OnAck schedules it when the current occurrence is acked, dead-lettered or
	// cancelled: occurrences never overlap.
	OnAck Advance = iota
	// OnTake schedules it as soon as a consumer takes the current one, so a slow
	// occurrence does not delay the next.
	OnTake
)

// Series defines a recurring series of tasks.
type Series struct {
	// Queue names the queue its occurrences go to.
	Queue string
	// Name identifies the series in its queue; at most MaxNameBytes.
	Name string
	// Every runs the series at a fixed interval (whole milliseconds, at least a second),
	// counted from Start, or from creation when Start is zero. Set Every or Cron.
	Every time.Duration
	// Cron runs the series by a cron expression: 5 fields (minute hour day-of-month
	// month day-of-week), 6 with seconds first, or a descriptor such as "@daily".
	Cron string
	// TimeZone is the IANA zone Cron is read in. Across a daylight-saving change, a time
	// that does not exist runs when the clock jumps past it, and a time that occurs twice
	// runs once. Defaults to UTC.
	TimeZone string
	// Start is the earliest occurrence time, in whole milliseconds (as due times are
	// stored). Defaults to none: the series starts now.
	Start time.Time
	// End is the latest occurrence time. Defaults to none.
	End time.Time
	// Count is how many occurrences run in all. Defaults to 0, no limit.
	Count int64
	// Payload, Priority and Timeout are each occurrence's; a zero Timeout means the
	// queue's default.
	Payload  []byte
	Priority int
	Timeout  time.Duration
	// Kind is each occurrence's kind (producer.Task.Kind): the worker of a shardq.Client
	// that runs it, with Payload as its args' JSON. Defaults to none.
	Kind string
	// Missed is the policy for missed occurrences. Defaults to Skip.
	Missed Missed
	// Advance says when the next occurrence is scheduled. Defaults to OnAck.
	Advance Advance
}

// Info is a series as stored, with where it stands.
type Info struct {
	Series
	Paused bool
	// Ended says the series reached its End or Count: it schedules nothing more.
	Ended bool
	// Occurrences counts the occurrences scheduled so far.
	Occurrences int64
	// NextID and NextAt name the outstanding occurrence (pending, in flight or retrying)
	// and its time in the series; zero when none is outstanding.
	NextID    uuid.UUID
	NextAt    time.Time
	CreatedAt time.Time
}

// Config configures a Client.
type Config struct {
	// Clock gives "now" for scheduling occurrences. Defaults to the cluster's time, as
	// producer.Config.Clock does.
	Clock shardqtype.Clock
	// Logger receives warnings and debug events. Defaults to a logger that discards.
	Logger *slog.Logger
}

// Client creates and manages series. It is safe for concurrent use.
type Client struct {
	env      *iseries.Env
	producer *producer.Producer
	tasks    *tasklookup.Finder // tells the keeper whether an occurrence is outstanding
	state    *sessionstate.State
}

// New returns a Client writing through session, whose keyspace holds shardq's tables.
func New(d *shardqtype.Driver, cfg Config) (*Client, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st := sessionstate.For(d, cfg.Logger)
	cluster := st.ClusterFor(cfg.Clock)
	if cfg.Clock == nil {
		cfg.Clock = cluster
	}
	p, err := producer.New(d, producer.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Client{producer: p, state: st, tasks: tasklookup.New(st.Store, cfg.Clock, st.Queue),
		env: &iseries.Env{Store: st.Store.Series(), Tasks: st.Store.Tasks(), Clock: cfg.Clock, Cluster: cluster, Log: cfg.Logger, Signals: st.Signals, Bus: st.Bus, Layout: st.Fixed, KeptNames: st.KeptNames}}, nil
}

// Create creates a series and schedules its first occurrence. Creating a series that
// exists with an equal definition returns it unchanged; with another definition it
// returns a *ConflictError.
func (c *Client) Create(ctx context.Context, s Series) (*Info, error) {
	q, spec, err := c.check(ctx, s)
	if err != nil {
		return nil, err
	}
	st, created, err := c.env.Create(ctx, q, s.Name, spec)
	if err != nil {
		return nil, err
	}
	if !created && st.Spec.Encode() != spec.Encode() {
		return nil, &ConflictError{Queue: s.Queue, Name: s.Name, Existing: info(st).Series}
	}
	return info(st), nil
}

// Get returns a series, or ErrNotFound.
func (c *Client) Get(ctx context.Context, queue, name string) (*Info, error) {
	if _, err := c.queue(ctx, queue); err != nil {
		return nil, err
	}
	st, err := c.env.Load(ctx, queue, name, false)
	if err != nil {
		return nil, err
	}
	return info(st), nil
}

// List returns the series of a queue, by name.
func (c *Client) List(ctx context.Context, queue string) ([]*Info, error) {
	if _, err := c.queue(ctx, queue); err != nil {
		return nil, err
	}
	names, err := c.env.Names(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := make([]*Info, 0, len(names))
	for _, name := range names {
		st, err := c.env.Load(ctx, queue, name, false)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // deleted while listed
		case err != nil:
			return nil, err
		}
		out = append(out, info(st))
	}
	return out, nil
}

// Pause stops a series from scheduling occurrences. Its pending occurrence is
// cancelled; one in flight finishes, and nothing follows it. Pausing a paused series
// does nothing.
func (c *Client) Pause(ctx context.Context, queue, name string) error {
	q, err := c.queue(ctx, queue)
	if err != nil {
		return err
	}
	st, err := c.env.Change(ctx, q, name, func(st *iseries.State, _ time.Time) (bool, error) {
		if st.Paused {
			return false, nil
		}
		st.Paused = true
		return true, nil
	})
	if err != nil || !st.Open {
		return err
	}
	return c.withdraw(ctx, q, st)
}

// withdraw cancels the outstanding occurrence of a paused series and closes the series
// on it. An occurrence in flight is left to finish: its ack closes the series.
func (c *Client) withdraw(ctx context.Context, q shardqtype.QueueConfig, st iseries.State) error {
	cancelled, err := c.cancel(ctx, q, st)
	if err != nil || !cancelled {
		return err
	}
	return c.env.Advance(ctx, q, st.Name, st.TaskID, false)
}

// cancel cancels st's outstanding occurrence if it is still pending. One in flight, or
// already ended, is left to its consumer, whose ack (or the keeper) moves the series on.
func (c *Client) cancel(ctx context.Context, q shardqtype.QueueConfig, st iseries.State) (bool, error) {
	if st.Pending() {
		// Possibly not written yet: writing it first makes the cancel definite, unless
		// its place is too old to write it at, where it is deleted instead.
		if gone, err := c.env.Unplace(ctx, q, st); err != nil || gone {
			return gone, err
		}
		if err := c.env.Write(ctx, q, st); err != nil {
			return false, err
		}
	}
	err := c.producer.Cancel(ctx, st.TaskID, producer.CancelOptions{})
	if errors.Is(err, shardqtype.ErrTaskInFlight) || errors.Is(err, shardqtype.ErrTaskNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Resume lets a paused series schedule occurrences again, from now on: the next one is
// the first still in the future, or one catch-up run at once with CatchUp.
func (c *Client) Resume(ctx context.Context, queue, name string) error {
	q, err := c.queue(ctx, queue)
	if err != nil {
		return err
	}
	_, err = c.env.Change(ctx, q, name, func(st *iseries.State, now time.Time) (bool, error) {
		if !st.Paused {
			return false, nil
		}
		st.Paused = false
		if st.Open || st.Done {
			return true, nil
		}
		return true, st.Next(now)
	})
	return err
}

// Update changes a series' definition. A pending occurrence is replaced by one
// scheduled by the new definition; one in flight finishes, and the new definition
// schedules the next.
func (c *Client) Update(ctx context.Context, s Series) (*Info, error) {
	q, spec, err := c.check(ctx, s)
	if err != nil {
		return nil, err
	}
	st, err := c.env.Change(ctx, q, s.Name, func(st *iseries.State, _ time.Time) (bool, error) {
		if st.Spec.Encode() == spec.Encode() {
			return false, nil
		}
		st.Spec = spec
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if st.Open && !st.Paused {
		err = c.replace(ctx, q, st)
	}
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, s.Queue, s.Name)
}

// replace cancels a pending occurrence and schedules the one the series' definition
// gives now in its place, keeping its number.
func (c *Client) replace(ctx context.Context, q shardqtype.QueueConfig, st iseries.State) error {
	cancelled, err := c.cancel(ctx, q, st)
	if err != nil || !cancelled {
		return err
	}
	_, err = c.env.Change(ctx, q, st.Name, func(cur *iseries.State, now time.Time) (bool, error) {
		if !cur.Open || cur.TaskID != st.TaskID {
			return false, nil
		}
		return true, cur.Replace(now)
	})
	return err
}

// Delete removes a series. Its pending occurrence is cancelled; one in flight finishes.
func (c *Client) Delete(ctx context.Context, queue, name string) error {
	q, err := c.queue(ctx, queue)
	if err != nil {
		return err
	}
	for range 8 {
		st, err := c.env.Load(ctx, queue, name, true)
		if err != nil {
			return err
		}
		deleted, err := c.env.Delete(ctx, st)
		if err != nil {
			return err
		}
		if !deleted {
			continue
		}
		if !st.Open {
			return nil
		}
		_, err = c.cancel(ctx, q, st)
		return err
	}
	return fmt.Errorf("series: %s of queue %s changed under every one of 8 attempts to delete it", name, queue)
}

// Keep checks every series of a queue once (as listed at most 15 s ago: one created
// since is checked by the next call), and
// repairs those whose consumer or scheduler died between two steps: an occurrence not
// written is written, and a series whose occurrence ended without moving it on is moved. Workers call it every
// worker.DefaultSeriesInterval; call it as often if you consume with package consumer
// directly.
func (c *Client) Keep(ctx context.Context, queue string) error {
	q, err := c.queue(ctx, queue)
	if err != nil {
		return err
	}
	return c.env.Keep(ctx, q, func(ctx context.Context, id uuid.UUID) (iseries.Status, error) {
		// Locate, not Get: a completed occurrence is reported whatever the retention.
		f, err := c.tasks.Locate(ctx, id)
		switch {
		case errors.Is(err, shardqtype.ErrTaskNotFound):
			return iseries.Gone, nil
		case err != nil:
			return 0, err
		}
		switch {
		case f.State == taskindex.Scheduled:
			return iseries.Waiting, nil
		case f.State.Final():
			return iseries.Ended, nil
		}
		return iseries.Taken, nil
	})
}

// Every call asks for its queue first, so this is where the cluster's clock must have
// been measured before anything is stamped by it, as producer's queue does: a host ahead of the cluster
// by more than clustertime.WriteLag would stamp occurrences that a later delete cannot
// shadow (a Pause's cancel of the first occurrence, say).
func (c *Client) queue(ctx context.Context, name string) (shardqtype.QueueConfig, error) {
	if err := c.env.Cluster.Ready(ctx); err != nil {
		return shardqtype.QueueConfig{}, err
	}
	return c.state.Queue(ctx, name)
}

// check validates s, naming the field at fault, and returns its queue and stored spec.
func (c *Client) check(ctx context.Context, s Series) (shardqtype.QueueConfig, iseries.Spec, error) {
	switch {
	case s.Name == "" || len(s.Name) > MaxNameBytes:
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Name", "%q is empty or over %d bytes", s.Name, MaxNameBytes)
	case s.Priority < shardqtype.MinPriority || s.Priority > shardqtype.MaxPriority:
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Priority", "%d is not in [%d, %d]", s.Priority, shardqtype.MinPriority, shardqtype.MaxPriority)
	case len(s.Payload) > producer.DefaultMaxPayloadBytes:
		return shardqtype.QueueConfig{}, iseries.Spec{}, &shardqtype.ValidationError{Field: "Series.Payload",
			Reason: fmt.Sprintf("%d bytes is over the %d allowed", len(s.Payload), producer.DefaultMaxPayloadBytes), Err: producer.ErrPayloadTooLarge}
	case len(s.Kind) > producer.MaxKindBytes || !utf8.ValidString(s.Kind):
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Kind", "%q is not UTF-8 of at most %d bytes", s.Kind, producer.MaxKindBytes)
	case s.Missed != Skip && s.Missed != CatchUp:
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Missed", "%d is neither Skip nor CatchUp", s.Missed)
	case s.Advance != OnAck && s.Advance != OnTake:
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Advance", "%d is neither OnAck nor OnTake", s.Advance)
	case !s.Start.IsZero() && (s.Start.Before(shard.MinIDTime) || s.Start.After(shard.MaxIDTime)):
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.Start", "%v is outside [%v, %v]", s.Start, shard.MinIDTime.UTC(), shard.MaxIDTime)
	case !s.End.IsZero() && (s.End.Before(shard.MinIDTime) || s.End.After(shard.MaxIDTime)):
		return shardqtype.QueueConfig{}, iseries.Spec{}, defaults.Invalid("Series.End", "%v is outside [%v, %v]", s.End, shard.MinIDTime.UTC(), shard.MaxIDTime)
	}
	q, err := c.queue(ctx, s.Queue)
	if err != nil {
		return q, iseries.Spec{}, err
	}
	if s.Timeout != 0 {
		if err := q.ValidateTimeout("Series.Timeout", s.Timeout); err != nil {
			return q, iseries.Spec{}, err
		}
	}
	spec := iseries.Spec{Every: s.Every, Cron: s.Cron, TimeZone: s.TimeZone, Start: utc(s.Start), End: utc(s.End),
		Count: s.Count, Payload: s.Payload, Priority: s.Priority, Timeout: s.Timeout, CatchUp: s.Missed == CatchUp,
		OnTake: s.Advance == OnTake, Kind: s.Kind}
	if _, err := spec.Schedule(); err != nil {
		var fe interface{ Field() string }
		if errors.As(err, &fe) {
			return q, spec, defaults.Invalid("Series."+fe.Field(), "%s", err.Error())
		}
		return q, spec, err
	}
	return q, spec, nil
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

func info(st iseries.State) *Info {
	s := st.Spec
	in := &Info{Series: Series{Queue: st.Queue, Name: st.Name, Every: s.Every, Cron: s.Cron, TimeZone: s.TimeZone,
		Start: s.Start, End: s.End, Count: s.Count, Payload: s.Payload, Priority: s.Priority, Timeout: s.Timeout,
		Kind: s.Kind},
		Paused: st.Paused, Ended: st.Done, Occurrences: st.Seq, CreatedAt: st.CreatedAt}
	if s.CatchUp {
		in.Missed = CatchUp
	}
	if s.OnTake {
		in.Advance = OnTake
	}
	if st.Open {
		in.NextID, in.NextAt = st.TaskID, st.Nominal
	}
	return in
}
