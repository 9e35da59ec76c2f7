package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
)

func (a *app) schemaCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "schema",
		Short: "Manage shardq's tables",
	}
	c.AddCommand(&cobra.Command{
		Use:   "apply",
		Short: "Create shardq's tables in the keyspace (idempotent)",
		Long: `Create shardq's tables in the keyspace, from the schema.cql embedded in this binary.
Every statement is CREATE ... IF NOT EXISTS: applying it again changes nothing, and an
existing table is never altered. The keyspace must exist.`,
		Args: args(),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return a.withSession(ctx, func(s *shardq.Driver) error {
				if err := shardq.ApplySchema(ctx, s); err != nil {
					return err
				}
				n := len(shardq.Schema())
				if a.json {
					return a.emit(map[string]any{"keyspace": a.keyspace, "statements": n})
				}
				_, err := fmt.Fprintf(a.stdout, "schema applied to keyspace %s (%d statements)\n", a.keyspace, n)
				return err
			})
		}),
	})
	return c
}
