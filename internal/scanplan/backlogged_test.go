package scanplan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A peek that saw a partition's first PeekLimit rows visible, so perhaps more, marks it
// due now and spares the call its look ahead; partitions seen whole are left as they are.
func TestBacklogged(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(time.Second)
	parts := []Part{{Avail: 3, Next: later}, {Avail: PeekLimit}, {Avail: PeekLimit}}
	require.False(t, Backlogged(parts, []int{0}, now))
	require.Equal(t, later, parts[0].Next)
	require.True(t, Backlogged(parts, []int{0, 1}, now))
	require.Equal(t, []time.Time{later, now, {}}, []time.Time{parts[0].Next, parts[1].Next, parts[2].Next})
}
