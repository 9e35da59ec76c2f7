package shardq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every table of the schema is recognised, so ApplySchema can wait for it and check it.
func TestSchemaTablesRecognised(t *testing.T) {
	t.Parallel()
	n := 0
	for _, stmt := range Schema() {
		if createTable.MatchString(stmt) {
			n++
		}
	}
	require.Equal(t, 8, n)
}
