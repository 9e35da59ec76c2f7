package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/shardqtype"
)

func (a *app) peekCmd() *cobra.Command {
	var n int
	c := &cobra.Command{
		Use:   "peek QUEUE",
		Short: "Show the tasks due next, in delivery order, without leasing them",
		Long: `Show up to -n tasks due now, highest priority first, then the longest waiting: the
order consumers deliver them in within a concurrency shard (across shards it is best
effort). Nothing is leased, written or locked: consumers may take these tasks while you
look. Reads every partition of the lap from the consumers' read floors, at most n rows
each, and then the n payloads shown.

With --json, each task is one line; its payload is base64 (jq: .payload | @base64d).
No task due means no line.`,
		Example: `  shardq peek emails
  shardq peek emails -n 100 --json | jq -r '.payload | @base64d'`,
		Args: args("QUEUE"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			if n < 1 || n > inspect.MaxPeek {
				return usagef("-n %d is not in [1, %d]", n, inspect.MaxPeek)
			}
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				now := time.Now()
				got, err := in.Peek(ctx, args[0], n)
				if err != nil {
					return err
				}
				if err := a.printPeek(args[0], got.Tasks, now); err != nil {
					return err
				}
				if len(got.Failed) > 0 {
					return fmt.Errorf("%d partitions could not be read, and their tasks may be missing above; the first: %w",
						len(got.Failed), got.Failed[0])
				}
				return nil
			})
		}),
	}
	c.Flags().IntVarP(&n, "n", "n", 20, fmt.Sprintf("how many tasks to show, at most %d", inspect.MaxPeek))
	return c
}

func (a *app) printPeek(queue string, tasks []shardqtype.TaskInfo, now time.Time) error {
	if a.json {
		for _, t := range tasks {
			err := a.emit(map[string]any{
				"id": t.ID, "priority": t.Priority, "visible_at": t.VisibleAt.UTC(), "due_at": t.DueAt.UTC(),
				"attempt": t.Attempt, "timeout_ms": ms(t.Timeout), "partition_key": t.PartitionKey, "payload": t.Payload,
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	if len(tasks) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no task due in queue %s\n", queue)
		return err
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PRIORITY\tWAITING\tATTEMPTS\tID\tPAYLOAD")
	for _, t := range tasks {
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\n", t.Priority, age(max(0, now.Sub(t.VisibleAt))), t.Attempt, t.ID, preview(t.Payload))
	}
	return w.Flush()
}

// previewRunes is how much of a payload a line shows.
const previewRunes = 60

// preview shows a payload on one line: quoted text, shortened, or its size when binary.
func preview(p []byte) string {
	if !utf8.Valid(p) || strings.IndexFunc(string(p), func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) >= 0 {
		return fmt.Sprintf("<%d bytes, binary>", len(p))
	}
	s := []rune(string(p))
	if len(s) > previewRunes {
		return fmt.Sprintf("%q... (%d bytes)", string(s[:previewRunes]), len(p))
	}
	return fmt.Sprintf("%q", string(s))
}
