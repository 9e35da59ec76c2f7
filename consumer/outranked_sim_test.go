package consumer_test

// Interleavings found by review of the outranked-marker rule (take.go, outranked), on the
// simulator's store (internal/memstore) under testing/synctest, where each step can be put
// exactly: every one lost a task before a marker was dropped only beside a lease that
// took effect. TestOutrankedOnlyByALeaseThatTookEffect pins the first on a real node.

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/lock"

	"github.com/shardq/shardq/producer"
)

type rig struct {
	t       *testing.T
	cluster *memstore.Cluster
	q       shardq.QueueConfig
}

func newRig(t *testing.T) *rig {
	cl, err := memstore.New(memstore.Config{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	q := shardq.QueueConfig{Name: "q", ShardCount: 1, BucketCount: 60, BucketDuration: time.Second, DefaultTimeout: 3 * time.Second}.WithDefaults()
	admin := cl.Client(memstore.ClientConfig{Clock: time.Now})
	if _, _, err := admin.Queues().Create(context.Background(), store.Queue(q)); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, cluster: cl, q: q}
}

func (r *rig) session(gate memstore.Gate) (*gocql.Session, *sessionstate.State) {
	s := new(gocql.Session)
	st := sessionstate.New(r.cluster.Client(memstore.ClientConfig{Clock: time.Now, Gate: gate}), nil, nil)
	r.t.Cleanup(sessionstate.Bind(s, st))
	return s, st
}

func (r *rig) consumer(gate memstore.Gate) *consumer.Consumer {
	s, _ := r.session(gate)
	c, err := consumer.New(s, consumer.Config{Queue: r.q.Name})
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *rig) entry(id uuid.UUID) string {
	_, st := r.session(nil)
	e, stamp, err := st.Store.Index().Read(context.Background(), id)
	if err != nil {
		return err.Error()
	}
	return itoa(int64(e.State)) + " row=" + e.Row.Key + "/" + uuid.UUID(e.Row.ID).String() + " prev=" + e.Prev.Key + "/" + uuid.UUID(e.Prev.ID).String() +
		" delivery=" + itoa((stamp-0)>>0)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// acquireFor polls c for d and returns what it got.
func acquireFor(t *testing.T, c *consumer.Consumer, d time.Duration) []*consumer.Task {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		got, err := c.AcquireTasks(context.Background(), 10)
		if err != nil {
			t.Logf("acquire: %v", err)
		}
		if len(got) > 0 {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// E: a holder's Extend at its deadline wins against a take C of its expired marker; C's
// announcement (token+1) stays in the index; the extended marker is then outranked.
func TestSimExtendRaceKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		ps, _ := r.session(nil)
		p, err := producer.New(ps, producer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: r.q.Name, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		h := r.consumer(nil)
		got := acquireFor(t, h, 5*time.Second)
		if len(got) != 1 {
			t.Fatalf("first acquire: %d", len(got))
		}
		held := got[0]
		t.Logf("H leased token %d deadline %v", held.Token, time.Until(held.Deadline))
		// Past the deadline: C reads the expired marker, and H extends before C's swap.
		time.Sleep(time.Until(held.Deadline) + 200*time.Millisecond)
		c := r.consumer(nil)
		extended := false
		consumer.SetBeforeSwap(c, func() {
			if extended {
				return
			}
			extended = true
			if err := h.Extend(ctx, held, 10*time.Second); err != nil {
				t.Logf("extend: %v", err)
			} else {
				t.Logf("H extended to %v", time.Until(held.Deadline))
			}
		})
		cg, err := c.AcquireTasks(ctx, 10)
		t.Logf("C got %d (err %v); entry: %s", len(cg), err, r.entry(id))
		if len(cg) > 0 {
			t.Skip("C's take won")
		}
		// H dies without acking. Its extended marker comes due.
		time.Sleep(time.Until(held.Deadline) + 500*time.Millisecond)
		d := r.consumer(nil)
		again := acquireFor(t, d, 20*time.Second)
		t.Logf("after H's death: %d delivered; entry: %s", len(again), r.entry(id))
		if len(again) == 0 {
			t.Errorf("task %s lost: never delivered again after its holder died", id)
		}
	})
}

// A: an Extend whose marker move applied but whose outcome stayed unknown (the SERIAL
// read back failed), then tried again (as worker.keepLease does a quarter term later):
// the retry's entry names neither the marker the first move wrote nor the old one, the
// retry gets ErrLeaseLost, and the first move's marker is then outranked.
func TestSimExtendUnknownThenRetryKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		ps, _ := r.session(nil)
		p, err := producer.New(ps, producer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: r.q.Name, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		faulty := false
		h := r.consumer(func(_ context.Context, q memstore.Request) (memstore.Fault, error) {
			if !faulty {
				return memstore.None, nil
			}
			switch q.Op {
			case "Leasing.DeleteMarker", "Leasing.ReplaceMarker":
				return memstore.NoResponseApplied, nil
			case "Leasing.MarkersThere":
				faulty = false
				return memstore.Unavailable, nil
			}
			return memstore.None, nil
		})
		got := acquireFor(t, h, 5*time.Second)
		if len(got) != 1 {
			t.Fatalf("first acquire: %d", len(got))
		}
		held := got[0]
		time.Sleep(held.Timeout / 2)
		faulty = true
		err = h.Extend(ctx, held, 10*time.Second)
		t.Logf("first extend: %v; entry %s", err, r.entry(id))
		time.Sleep(held.Timeout / 4)
		err = h.Extend(ctx, held, 10*time.Second)
		t.Logf("second extend: %v; entry %s", err, r.entry(id))
		// The holder gives up (lease lost) and does not ack; the task should come back.
		d := r.consumer(nil)
		again := acquireFor(t, d, 30*time.Second)
		t.Logf("%d delivered again; entry %s", len(again), r.entry(id))
		if len(again) == 0 {
			t.Errorf("task %s lost", id)
		}
	})
}

// F: a holder's Retry wins against a take C of its expired marker (C's announcement at
// token+1, with C's lock token, stays); the retry row, in another partition whose lock
// tokens are lower, is leased by D at token+1 with a lower lease step, so D's
// announcement is hidden; D's holder dies and its marker is outranked.
func TestSimRetryRaceAcrossPartitionsKeepsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		ps, _ := r.session(nil)
		p, err := producer.New(ps, producer.Config{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.ScheduleTask(ctx, producer.Task{Queue: r.q.Name, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		h := r.consumer(nil)
		got := acquireFor(t, h, 5*time.Second)
		if len(got) != 1 {
			t.Fatalf("first acquire: %d", len(got))
		}
		held := got[0]
		// Bump the lock tokens of the marker's partition.
		lay := r.q.Layout()
		key := lay.Key(lay.Bucket(held.Deadline), lay.ShardFor(id))
		ls, _ := r.session(nil)
		locker, err := lock.New(ls, lock.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			lk, err := locker.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Until(held.Deadline) + 200*time.Millisecond)
		c := r.consumer(nil)
		retried := false
		consumer.SetBeforeSwap(c, func() {
			if retried {
				return
			}
			retried = true
			t.Logf("H retry: %v", h.Retry(ctx, held, 5*time.Second))
		})
		cg, err := c.AcquireTasks(ctx, 10)
		t.Logf("C got %d (err %v); entry: %s", len(cg), err, r.entry(id))
		if len(cg) > 0 {
			t.Skip("C's take won")
		}
		d := r.consumer(nil)
		dg := acquireFor(t, d, 10*time.Second)
		if len(dg) != 1 {
			t.Fatalf("retry not delivered: %d", len(dg))
		}
		t.Logf("D leased token %d; entry: %s", dg[0].Token, r.entry(id))
		// D's holder dies. Its marker comes due.
		time.Sleep(time.Until(dg[0].Deadline) + 500*time.Millisecond)
		e := r.consumer(nil)
		again := acquireFor(t, e, 20*time.Second)
		t.Logf("after D's death: %d delivered; entry: %s", len(again), r.entry(id))
		if len(again) == 0 {
			t.Errorf("task %s lost", id)
		}
	})
}
