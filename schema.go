package shardq

import (
	"context"
	_ "embed"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/schema"
)

//go:embed schema.cql
var schemaCQL string

// Schema returns the CQL statements of schema.cql, in order, without comments.
func Schema() []string { return schema.Statements(schemaCQL) }

// ApplySchema creates shardq's tables in the session's keyspace, and returns once every
// node has them. Every statement is idempotent, so it is safe to call at every start.
//
// A loaded node can take longer over a schema change than the driver waits for an answer
// (RecommendedTimeout), and the change may then still be under way there: sent to another
// node at once, it could create the same table twice, with two IDs, which Cassandra does
// not reconcile. So the driver never retries these statements; ApplySchema waits for the
// table to appear instead, and sends the statement again only if it does not.
func ApplySchema(ctx context.Context, session *gocql.Session) error {
	return schema.Apply(ctx, gocqlv1.New(session), Schema())
}
