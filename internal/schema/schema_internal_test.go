package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every table of the schema is recognised, so ApplySchema can wait for it and check it.
func TestSchemaTablesRecognised(t *testing.T) {
	t.Parallel()
	n := 0
	stmts := rootSchema(t)
	for _, stmt := range stmts {
		if createTable.MatchString(stmt) {
			n++
		}
	}
	require.Equal(t, 9, n)
}

// Every statement of the schema is one whose effect ApplySchema can look for, so a
// statement the node took too long to answer is waited for rather than failed.
func TestSchemaStatementsCheckable(t *testing.T) {
	t.Parallel()
	stmts := rootSchema(t)
	for _, stmt := range stmts {
		require.True(t, tableOf(stmt) != "" || addColumn.MatchString(stmt), stmt)
	}
	require.Equal(t, []string{"alter table queue_signals add if not exists slots", "queue_signals", "slots"},
		append([]string{strings.ToLower(addColumn.FindString(stmts[6]))}, addColumn.FindStringSubmatch(stmts[6])[1:]...))
}

// rootSchema is schema.cql's statements: the root package embeds the file, and the tests
// of this package read it where it lies.
func rootSchema(t *testing.T) []string {
	t.Helper()
	cql, err := os.ReadFile(filepath.Join("..", "..", "schema.cql"))
	require.NoError(t, err)
	return Statements(string(cql))
}
