package workerloop

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A fetch that took everything due lingers BatchDelay, or less when the stream's pace
// fills a fetch sooner; the first fetch of a stream (no earlier fetch found tasks, or one
// more than lingerReach lingers back) goes on at once.
func TestLinger(t *testing.T) {
	t.Parallel()
	w := &Worker{cfg: Config{BatchDelay: 200 * time.Millisecond}}
	require.Equal(t, 200*time.Millisecond, w.linger(10, 100, 100*time.Millisecond), "a fetch's worth gathers in 1 s")
	require.Equal(t, 50*time.Millisecond, w.linger(80, 100, 40*time.Millisecond), "a fetch's worth gathers in 50 ms")
	require.Equal(t, 200*time.Millisecond, w.linger(1, 100, time.Second), "a sparse stream within reach")
	require.Zero(t, w.linger(1, 100, time.Second+time.Millisecond), "beyond lingerReach")
	require.Zero(t, w.linger(128, 1000, time.Duration(math.MaxInt64)), "no fetch found tasks before")
}
