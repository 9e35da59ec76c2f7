package signal_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/signal"
	"github.com/shardq/shardq/shard"
)

// cells is a signal table whose touches fail while fail says so.
type cells struct {
	mu      sync.Mutex
	fail    func(n int) error // the error of the nth touch (from 0), or nil
	calls   int
	touched map[signal.Entry]time.Time // entry: when it was last written
}

func (c *cells) Touch(_ context.Context, ts []signal.Touch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.calls
	c.calls++
	if err := c.fail(n); err != nil {
		return err
	}
	for _, t := range ts {
		c.touched[t.Entry] = time.Now()
	}
	return nil
}

func (c *cells) state() (calls int, touched map[signal.Entry]time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.touched
}

var layout = shard.Layout{Queue: "q", BucketCount: 60, BucketDuration: 5 * time.Second, ShardCount: 1}

// touchNow touches the cell of one row due in a second, as a producer does after writing
// it, and returns the entry touched.
func touchNow(tc *signal.Toucher) (signal.Entry, error) {
	at := time.Now().Add(time.Second)
	b := layout.Bucket(at)
	var ts signal.Touches
	ts.Add(layout, shard.NewID(at), uuid.New())
	err := tc.Touch(context.Background(), &ts)
	return signal.Entry{Cell: signal.Cell{Queue: "q", Bucket: b}, Slot: int(at.Sub(layout.BucketStart(b)) / signal.SlotWidth)}, err
}

// A touch that fails while its writer lives on is retried until it applies: idle
// consumers pass a partition whose cell shows no touch in its lap, so a row written into
// the current bucket after its read, whose touch failed, waited a whole lap (seeds
// 10000586, 10011621 and 10018550 of the simulator on 224f908).
func TestFailedTouchRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &cells{touched: map[signal.Entry]time.Time{}, fail: func(n int) error {
			if n < 3 {
				return driver.NewError(driver.CodeUnavailable, false, "unavailable")
			}
			return nil
		}}
		tc := signal.NewToucher(w, slog.New(slog.NewTextHandler(io.Discard, nil)))
		e, err := touchNow(tc)
		require.Error(t, err, "the touch's own failure is returned, for the caller to log")
		failedAt := time.Now()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		calls, touched := w.state()
		require.Equal(t, 4, calls, "tried again after 100, 200 and 400 ms")
		require.Contains(t, touched, e)
		require.Equal(t, 700*time.Millisecond, touched[e].Sub(failedAt))

		// A touch that applies is not sent again.
		time.Sleep(time.Minute)
		synctest.Wait()
		calls, _ = w.state()
		require.Equal(t, 4, calls)
	})
}

// A touch refused for what it is would be refused again: it is not retried.
func TestRefusedTouchNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := fmt.Errorf("touching: %w: ttl is too large", signal.ErrRefused)
		w := &cells{touched: map[signal.Entry]time.Time{}, fail: func(int) error { return refused }}
		tc := signal.NewToucher(w, slog.New(slog.NewTextHandler(io.Discard, nil)))
		_, err := touchNow(tc)
		require.ErrorIs(t, err, refused)
		time.Sleep(time.Minute)
		synctest.Wait()
		calls, _ := w.state()
		require.Equal(t, 1, calls)
	})
}

// A touch that keeps failing is retried until the ring comes back to its partition,
// whose first read in that lap finds the row anyway, no longer.
func TestFailingTouchRetriedUntilTheLapEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &cells{touched: map[signal.Entry]time.Time{}, fail: func(int) error { return context.DeadlineExceeded }}
		tc := signal.NewToucher(w, slog.New(slog.NewTextHandler(io.Discard, nil)))
		_, _ = touchNow(tc)
		lap := time.Duration(layout.BucketCount) * layout.BucketDuration
		time.Sleep(lap + 10*time.Second)
		synctest.Wait()
		calls, _ := w.state()
		time.Sleep(time.Hour)
		synctest.Wait()
		after, touched := w.state()
		require.Equal(t, calls, after, "no retry once the lap has come round")
		require.Empty(t, touched)
		// 100 ms, doubling to 5 s, for a lap (300 s) from a row due in about a second.
		require.InDelta(t, 300/5+6, calls, 3)
	})
}
