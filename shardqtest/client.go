package shardqtest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/wakeup"
	"github.com/shardq/shardq/shardqtype"
)

// Clock is the time of a client made by NewClient, which the test moves with Advance.
// It starts at the time NewClient was called and stands still in between.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	bus     *wakeup.Bus
	queues  []string
	settled *sync.Cond             // signalled when a task's outcome is written
	running map[uuid.UUID]struct{} // tasks started whose outcome is not written yet
}

// settleWait bounds how long Advance waits for the outcomes of tasks that finished.
const settleWait = 5 * time.Second

// observe keeps running up to date with the client's events.
func (c *Clock) observe(e shardq.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e := e.(type) {
	case shardq.TaskStarted:
		c.running[e.TaskID] = struct{}{}
		return
	case shardq.Acked:
		for _, id := range e.TaskIDs {
			delete(c.running, id)
		}
	case shardq.Retried:
		delete(c.running, e.TaskID)
	case shardq.Snoozed:
		delete(c.running, e.TaskID)
	case shardq.DeadLettered:
		delete(c.running, e.TaskID)
	case shardq.LeaseLost:
		delete(c.running, e.TaskID)
	default:
		return
	}
	c.settled.Broadcast()
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d ahead and wakes the client's idle workers, so that tasks
// that came due run without waiting for their next poll. It first waits, for a few
// seconds at most, until every task whose handler started has its outcome written (its
// ack, retry, snooze or dead letter), so that moving time does not end the lease of a
// task that finished but whose ack was still being gathered: that task would run again,
// as it would in a cluster whose clock jumped.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	timer := time.AfterFunc(settleWait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.settled.Broadcast()
	})
	for giveUp := time.Now().Add(settleWait); len(c.running) > 0 && time.Now().Before(giveUp); {
		c.settled.Wait()
	}
	timer.Stop()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	for _, q := range c.queues {
		c.bus.Wake(q, now)
	}
}

// Client is a shardq.Client working on a store held in memory (NewClient), with the
// clock it runs on and a driver standing for the store.
type Client struct {
	*shardq.Client
	// Clock is the client's time, which the test moves.
	Clock *Clock
	// Driver stands for the in-memory store: the library's other parts given it
	// (inspect.New, producer.New, shardq.PauseQueue and the rest) work on the same store.
	// It has no session, so shardq.ApplySchema, which the store needs none of, fails on
	// it.
	Driver *shardqtype.Driver
}

// NewClient returns a client as shardq.NewClient does, working on a store held in
// memory instead of a Cassandra keyspace, so that a test of the code that inserts tasks
// and of its workers runs in milliseconds with no cluster. The store is the one the
// library's simulator runs on, held to Cassandra's behaviour by tests that run the same
// steps on a real node; it starts empty, with shardq's schema, and the queues cfg names
// are created when the client starts. cfg.Clock is replaced by Client.Clock, which the
// store's expiries follow too. The client is stopped when the test ends.
//
// Use a real node for tests of what only a cluster shows: several processes, failures,
// timing.
func NewClient(t testing.TB, cfg shardq.Config) *Client {
	t.Helper()
	clock := &Clock{now: time.Now(), queues: slices.Sorted(maps.Keys(cfg.Queues)), running: map[uuid.UUID]struct{}{}}
	clock.settled = sync.NewCond(&clock.mu)
	observer := cfg.Observer
	cfg.Observer = shardq.ObserverFunc(func(ctx context.Context, e shardq.Event) {
		clock.observe(e)
		if observer != nil {
			observer.Observe(ctx, e)
		}
	})
	cluster, err := memstore.New(memstore.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// A driver without a session stands for the store: the library's constructors find
	// the store bound to it, and never send it a request.
	d := driver.New(nil)
	st := sessionstate.New(cluster.Client(memstore.ClientConfig{Clock: clock.Now}), clock, cfg.Logger)
	sessionstate.Bind(d, st)
	clock.bus = st.Bus
	cfg.Clock = clock
	c, err := shardq.NewClient(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("shardqtest: stopping the client: %v", err)
		}
	})
	return &Client{Client: c, Clock: clock, Driver: d}
}
