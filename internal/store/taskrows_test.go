package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/taskrow"
)

// A row without headers writes no headers cell (neither a value nor a tombstone); one with
// them writes them as one value.
func TestInsertHeadersOnlyWhenSet(t *testing.T) {
	t.Parallel()
	bare := taskrow.Row{Key: "q:0:0", Payload: []byte("p"), Headers: map[string]string{}}
	stmt, args := rowInsert(bare, 1)
	require.NotContains(t, stmt, "headers")
	require.Len(t, args, 10)
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	stmt, args = rowInsertLWT(taskrow.Row{Key: "q:0:0", Headers: h})
	require.Contains(t, stmt, ", headers)")
	require.Equal(t, h, args[len(args)-1])
}
