package shardq

import (
	"context"
	_ "embed"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/schema"
	"github.com/shardq/shardq/shardqtype"
)

//go:embed schema.cql
var schemaCQL string

// Schema returns the CQL statements of schema.cql, in order, without comments.
func Schema() []string { return schema.Statements(schemaCQL) }

// ApplySchema creates shardq's tables in the keyspace of d's session, and returns once
// every node has them. Every statement is idempotent, so it is safe to call at every start.
//
// A loaded node can take longer over a schema change than the driver waits for an answer
// (RecommendedTimeout), and the change may then still be under way there: sent to another
// node at once, it could create the same table twice, with two IDs, which Cassandra does
// not reconcile. So the driver never retries these statements; ApplySchema waits for the
// table to appear instead, and sends the statement again only if it does not.
func ApplySchema(ctx context.Context, d *shardqtype.Driver) error {
	if d == nil || d.Session() == nil {
		return defaults.Invalid("driver", "has no session")
	}
	return schema.Apply(ctx, d.Session(), Schema())
}
