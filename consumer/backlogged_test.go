package consumer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A peek that saw a partition's first peekLimit rows visible, so perhaps more, marks it
// due now and spares the call its look ahead; partitions seen whole are left as they are.
func TestBacklogged(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(time.Second)
	parts := []part{{avail: 3, next: later}, {avail: peekLimit}, {avail: peekLimit}}
	require.False(t, backlogged(parts, []int{0}, now))
	require.Equal(t, later, parts[0].next)
	require.True(t, backlogged(parts, []int{0, 1}, now))
	require.Equal(t, []time.Time{later, now, {}}, []time.Time{parts[0].next, parts[1].next, parts[2].next})
}
