package cassandratest_test

import (
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
)

// TestSmoke shows the server behaves as the queue's design relies on: plain writes and
// reads, a conditional insert that applies once, and a conditional batch on one partition.
func TestSmoke(t *testing.T) {
	t.Parallel()
	s := cassandratest.DDLSession(t)
	require.NoError(t, s.Query(`CREATE TABLE kv (p text, c int, v text, PRIMARY KEY (p, c))`).Exec())

	for i := 0; i < 3; i++ {
		require.NoError(t, s.Query(`INSERT INTO kv (p, c, v) VALUES (?, ?, ?)`, "a", i, "x").Exec())
	}
	var n int
	require.NoError(t, s.Query(`SELECT count(*) FROM kv WHERE p = ?`, "a").Scan(&n))
	require.Equal(t, 3, n)

	insert := `INSERT INTO kv (p, c, v) VALUES (?, ?, ?) IF NOT EXISTS`
	applied, err := s.Query(insert, "b", 1, "first").MapScanCAS(map[string]any{})
	require.NoError(t, err)
	require.True(t, applied)
	existing := map[string]any{}
	applied, err = s.Query(insert, "b", 1, "second").MapScanCAS(existing)
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, "first", existing["v"])

	b := s.NewBatch(gocql.LoggedBatch)
	b.Query(`UPDATE kv SET v = ? WHERE p = ? AND c = ? IF v = ?`, "swapped", "b", 1, "first")
	b.Query(`INSERT INTO kv (p, c, v) VALUES (?, ?, ?)`, "b", 2, "added")
	applied, iter, err := s.ExecuteBatchCAS(b)
	require.NoError(t, err)
	require.NoError(t, iter.Close())
	require.True(t, applied)

	var v string
	require.NoError(t, s.Query(`SELECT v FROM kv WHERE p = ? AND c = ?`, "b", 1).Scan(&v))
	require.Equal(t, "swapped", v)
	require.NoError(t, s.Query(`SELECT v FROM kv WHERE p = ? AND c = ?`, "b", 2).Scan(&v))
	require.Equal(t, "added", v)
}
