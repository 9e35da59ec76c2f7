package shardq

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/gocql/gocql"
)

//go:embed schema.cql
var schemaCQL string

// Schema returns the CQL statements of schema.cql, in order, without comments.
func Schema() []string {
	var b strings.Builder
	for _, line := range strings.Split(schemaCQL, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	var stmts []string
	for _, s := range strings.Split(b.String(), ";") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}

// ApplySchema creates shardq's tables in the session's keyspace. Every statement is
// idempotent, so it is safe to call at every start.
func ApplySchema(ctx context.Context, session *gocql.Session) error {
	for _, stmt := range Schema() {
		if err := session.Query(stmt).WithContext(ctx).Exec(); err != nil {
			return fmt.Errorf("shardq: applying schema: %w", err)
		}
	}
	return nil
}
