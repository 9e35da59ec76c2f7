package fanout_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/fanout"
)

// TestEachLimit checks that Each calls fn once per index, reaches its limit and never
// passes it. The first calls wait until the limit is reached, so a run that stayed
// below it would hang rather than pass.
func TestEachLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		n, limit int
		wantMax  int
	}{
		{"n=0 calls nothing", 0, 4, 0},
		{"one call", 1, 4, 1},
		{"limit below n", 50, 4, 4},
		{"limit equals n", 8, 8, 8},
		{"limit above n", 3, 10, 3},
		{"limit 1 is sequential", 20, 1, 1},
		{"limit 0 counts as 1", 5, 0, 1},
		{"negative limit counts as 1", 5, -3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var inFlight, most atomic.Int32
			calls := make([]atomic.Int32, tc.n)
			reached := make(chan struct{})
			var once sync.Once
			err := fanout.Each(tc.n, tc.limit, func(i int) error {
				cur := inFlight.Add(1)
				for {
					m := most.Load()
					if cur <= m || most.CompareAndSwap(m, cur) {
						break
					}
				}
				if int(cur) >= tc.wantMax {
					once.Do(func() { close(reached) })
				}
				<-reached
				calls[i].Add(1)
				inFlight.Add(-1)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, int32(tc.wantMax), most.Load(), "most calls at once")
			for i := range calls {
				require.Equal(t, int32(1), calls[i].Load(), "calls of fn(%d)", i)
			}
		})
	}
}

func TestEachJoinsEveryError(t *testing.T) {
	t.Parallel()
	errOdd := errors.New("odd")
	err := fanout.Each(10, 3, func(i int) error {
		if i%2 == 1 {
			return fmt.Errorf("call %d: %w", i, errOdd)
		}
		return nil
	})
	require.ErrorIs(t, err, errOdd)
	var joined interface{ Unwrap() []error }
	require.ErrorAs(t, err, &joined)
	var msgs []string
	for _, e := range joined.Unwrap() {
		msgs = append(msgs, e.Error())
	}
	require.Equal(t, []string{"call 1: odd", "call 3: odd", "call 5: odd", "call 7: odd", "call 9: odd"}, msgs,
		"every error, in index order")
}

func TestEachNoErrors(t *testing.T) {
	t.Parallel()
	require.NoError(t, fanout.Each(5, 2, func(int) error { return nil }))
	require.NoError(t, fanout.Each(0, 2, func(int) error { panic("called with n=0") }))
}
