package taskrow_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/taskrow"
)

// rows builds rows from (key, payload bytes) pairs.
func rows(spec ...any) []taskrow.Row {
	var out []taskrow.Row
	for i := 0; i < len(spec); i += 2 {
		out = append(out, taskrow.Row{Key: spec[i].(string), Payload: make([]byte, spec[i+1].(int))})
	}
	return out
}

// same returns n rows of key with payloads of size bytes.
func same(key string, n, size int) []any {
	var spec []any
	for range n {
		spec = append(spec, key, size)
	}
	return spec
}

// seq returns the indexes [from, to).
func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestGroup(t *testing.T) {
	t.Parallel()
	const maxRows, maxBytes = taskrow.MaxBatchRows, taskrow.MaxBatchBytes
	for _, tc := range []struct {
		name string
		rows []taskrow.Row
		want [][]int
	}{
		{"no rows", nil, nil},
		{"one row", rows("a", 10), [][]int{{0}}},
		{"one partition under both limits", rows(same("a", 5, 10)...), [][]int{seq(0, 5)}},
		{"exactly the row limit", rows(same("a", maxRows, 0)...), [][]int{seq(0, maxRows)}},
		{"one row over the row limit", rows(same("a", maxRows+1, 0)...), [][]int{seq(0, maxRows), {maxRows}}},
		{"rows limit over several batches", rows(same("a", 2*maxRows+3, 1)...),
			[][]int{seq(0, maxRows), seq(maxRows, 2*maxRows), seq(2*maxRows, 2*maxRows+3)}},
		{"exactly the byte limit", rows("a", maxBytes/2, "a", maxBytes/2), [][]int{{0, 1}}},
		{"one byte over the byte limit", rows("a", maxBytes/2, "a", maxBytes/2, "a", 1), [][]int{{0, 1}, {2}}},
		{"a row alone over the byte limit", rows("a", maxBytes+1), [][]int{{0}}},
		{"a row over the byte limit gets its own batch", rows("a", 1, "a", maxBytes+1, "a", 1),
			[][]int{{0}, {1}, {2}}},
		{"partitions are batched apart, in order of first row", rows("a", 1, "b", 1, "a", 1, "c", 1, "b", 1),
			[][]int{{0, 2}, {1, 4}, {3}}},
		{"the row limit counts per partition",
			rows(append(append(same("a", maxRows, 0), same("b", maxRows, 0)...), "a", 0, "b", 0)...),
			[][]int{seq(0, maxRows), seq(maxRows, 2*maxRows), {2 * maxRows}, {2*maxRows + 1}}},
		{"the byte limit counts per partition", rows("a", maxBytes, "b", maxBytes, "a", 1, "b", 0),
			[][]int{{0}, {1, 3}, {2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := taskrow.Group(tc.rows)
			require.Equal(t, tc.want, got)
			checkBatches(t, tc.rows, got)
		})
	}
}

// checkBatches checks what every grouping must hold: each row in exactly one batch, in
// order; one partition per batch; limits kept except by a lone oversized row.
func checkBatches(t *testing.T, rs []taskrow.Row, batches [][]int) {
	t.Helper()
	seen := make([]int, len(rs))
	for _, b := range batches {
		require.NotEmpty(t, b)
		require.LessOrEqual(t, len(b), taskrow.MaxBatchRows)
		bytes := 0
		for j, i := range b {
			seen[i]++
			require.Equal(t, rs[b[0]].Key, rs[i].Key, "batch %v mixes partitions", b)
			if j > 0 {
				require.Less(t, b[j-1], i, "batch %v out of order", b)
			}
			bytes += len(rs[i].Payload)
		}
		if len(b) > 1 {
			require.LessOrEqual(t, bytes, taskrow.MaxBatchBytes, "batch %v", b)
		}
	}
	for i, n := range seen {
		require.Equal(t, 1, n, "row %d is in %d batches", i, n)
	}
}

// Headers weigh in batches as payload does.
func TestGroupCountsHeaders(t *testing.T) {
	t.Parallel()
	big := map[string]string{"k": string(make([]byte, taskrow.MaxBatchBytes/2))}
	rs := []taskrow.Row{{Key: "a", Headers: big}, {Key: "a", Headers: big}, {Key: "a", Payload: []byte("x")}}
	require.Equal(t, 2*(taskrow.MaxBatchBytes/2+1), rs[0].Size()+rs[1].Size())
	require.Equal(t, [][]int{{0}, {1, 2}}, taskrow.Group(rs))
}
