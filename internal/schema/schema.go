// Package schema applies schema.cql's statements, which the root package embeds: in the
// order written, each waited for rather than retried when a node is slow to answer.
package schema

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/shardq/shardq/internal/driver"
)

// Statements returns the CQL statements of cql (schema.cql's text), in order, without
// comments.
func Statements(cql string) []string {
	var b strings.Builder
	for _, line := range strings.Split(cql, "\n") {
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

// Apply applies stmts (Statements) in the session's keyspace, and returns once every
// node has the tables they make. Every statement is idempotent, so it is safe to call at every start.
//
// A loaded node can take longer over a schema change than the driver waits for an answer
// (shardq.RecommendedTimeout), and the change may then still be under way there: sent to another
// node at once, it could create the same table twice, with two IDs, which Cassandra does
// not reconcile. So the driver never retries these statements; Apply waits for the
// table to appear instead, and sends the statement again only if it does not.
func Apply(ctx context.Context, session driver.Session, stmts []string) error {
	for _, stmt := range stmts {
		if err := applyStatement(ctx, session, stmt); err != nil {
			return fmt.Errorf("shardq: applying schema: %w", err)
		}
	}
	// gocql waits for the nodes to agree after each change but only logs it when they do
	// not within MaxWaitSchemaAgreement, and a node without a table answers that it does
	// not exist (seen at RF 3 on loaded nodes).
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("shardq: applying schema: the nodes do not agree on it: %w", err)
	}
	missing, err := missingTables(ctx, session, stmts)
	if err != nil {
		return fmt.Errorf("shardq: applying schema: listing tables: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("shardq: applying schema: tables %v missing after it was applied", missing)
	}
	return nil
}

// missingTables names the tables of stmts that the session's keyspace lacks.
func missingTables(ctx context.Context, session driver.Session, stmts []string) ([]string, error) {
	have, err := names(ctx, session, `SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, stmt := range stmts {
		if name := tableOf(stmt); name != "" && !have[name] {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// names returns the first column of query's rows, which takes the session's keyspace
// and, optionally, more values.
func names(ctx context.Context, session driver.Session, query string, values ...any) (map[string]bool, error) {
	have := map[string]bool{}
	iter := session.Iter(ctx, driver.Statement{CQL: query, Args: append([]any{session.Keyspace()}, values...)})
	for name := ""; iter.Scan(&name); {
		have[strings.ToLower(name)] = true
	}
	return have, iter.Close()
}

// tableOf names the table stmt creates, or returns "" for another statement.
func tableOf(stmt string) string {
	if m := createTable.FindStringSubmatch(stmt); m != nil {
		return strings.ToLower(m[1])
	}
	return ""
}

// applied reports whether the change stmt makes is in the keyspace: its table for a
// CREATE TABLE, its column for an ALTER TABLE ... ADD, false for other statements.
func applied(ctx context.Context, session driver.Session, stmt string) (bool, error) {
	if name := tableOf(stmt); name != "" {
		have, err := names(ctx, session, `SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`)
		return have[name], err
	}
	if m := addColumn.FindStringSubmatch(stmt); m != nil {
		have, err := names(ctx, session,
			`SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?`, strings.ToLower(m[1]))
		return have[strings.ToLower(m[2])], err
	}
	return false, nil
}

const (
	// schemaAttempts bounds how many times one schema statement is sent.
	schemaAttempts = 3
	// schemaWait bounds the wait for a table whose creation got no answer.
	schemaWait = 30 * time.Second
	// schemaPoll is how often that wait looks.
	schemaPoll = 250 * time.Millisecond
)

var (
	createTable = regexp.MustCompile(`(?i)^CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)`)
	addColumn   = regexp.MustCompile(`(?i)^ALTER\s+TABLE\s+(\w+)\s+ADD\s+IF\s+NOT\s+EXISTS\s+(\w+)`)
)

func applyStatement(ctx context.Context, session driver.Session, stmt string) error {
	var err error
	for range schemaAttempts {
		err = session.Exec(ctx, driver.Statement{CQL: stmt, Mode: driver.Once})
		if !unanswered(err) || ctx.Err() != nil {
			return err
		}
		if done, werr := awaitApplied(ctx, session, stmt); done || werr != nil {
			return werr
		}
	}
	return err
}

// unanswered reports whether err says the node did not answer, so the statement may
// still be applied there.
func unanswered(err error) bool {
	return driver.Unanswered(err)
}

// awaitApplied waits, up to schemaWait, for the change stmt makes to show, and reports
// whether it did; once it shows, it waits for every node to agree on the schema for as
// long as ctx allows. (schemaWait is for a change that may never have been made: cut
// short, an agreement wait on a loaded cluster failed a change that had been made.)
func awaitApplied(ctx context.Context, session driver.Session, stmt string) (bool, error) {
	if tableOf(stmt) == "" && !addColumn.MatchString(stmt) {
		return false, nil
	}
	wait, cancel := context.WithTimeout(ctx, schemaWait)
	defer cancel()
	tick := time.NewTicker(schemaPoll)
	defer tick.Stop()
	for {
		if done, err := applied(wait, session, stmt); err == nil && done {
			return true, session.AwaitSchemaAgreement(ctx)
		}
		select {
		case <-wait.Done():
			if ctx.Err() == nil {
				return false, nil // not there: send it again
			}
			return false, ctx.Err()
		case <-tick.C:
		}
	}
}
