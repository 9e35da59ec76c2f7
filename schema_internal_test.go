package shardq

import (
	"strings"
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

// Every statement of the schema is one whose effect ApplySchema can look for, so a
// statement the node took too long to answer is waited for rather than failed.
func TestSchemaStatementsCheckable(t *testing.T) {
	t.Parallel()
	for _, stmt := range Schema() {
		require.True(t, tableOf(stmt) != "" || addColumn.MatchString(stmt), stmt)
	}
	require.Equal(t, []string{"alter table queue_signals add if not exists slots", "queue_signals", "slots"},
		append([]string{strings.ToLower(addColumn.FindString(Schema()[6]))}, addColumn.FindStringSubmatch(Schema()[6])[1:]...))
}
