package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

func (a *app) deadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dead",
		Short: "List, replay and purge dead letters: tasks that ran out of attempts",
		Long: `Dead letters are tasks that ran out of attempts, kept for 30 days. Replaying one puts
its task back in the queue, due now with its attempts reset; purging deletes it for good.
Acting on --all asks for confirmation, or needs --yes when standard input is not a
terminal.`,
	}
	c.AddCommand(a.deadListCmd(),
		a.deadActCmd("replay", "Put dead tasks back in their queue, due now", "replayed", "replaying",
			func(ctx context.Context, p *producer.Producer, queue string, id uuid.UUID) (uuid.UUID, error) {
				return p.ReplayDeadLetter(ctx, queue, id)
			}, (*producer.Producer).ReplayAllDeadLetters),
		a.deadActCmd("purge", "Delete dead letters for good", "purged", "purging",
			func(ctx context.Context, p *producer.Producer, queue string, id uuid.UUID) (uuid.UUID, error) {
				return uuid.Nil, p.PurgeDeadLetter(ctx, queue, id)
			}, (*producer.Producer).PurgeAllDeadLetters))
	return c
}

func (a *app) deadListCmd() *cobra.Command {
	var n int
	var before string
	c := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's dead letters, newest first",
		Long: `List up to -n dead letters of a queue, newest first. When more are kept, the last line
says how to list the next page (--before the last ID shown).

With --json, each letter is one line; its payload is base64 (jq: .payload | @base64d).`,
		Example: `  shardq dead list emails
  shardq dead list emails -n 100 --json | jq -r .error`,
		Args: args("QUEUE"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			if n < 1 || n > inspect.MaxDeadLetterLimit {
				return usagef("-n %d is not in [1, %d]", n, inspect.MaxDeadLetterLimit)
			}
			q := inspect.DeadLetterQuery{Limit: n + 1} // one more tells whether a next page exists
			if n == inspect.MaxDeadLetterLimit {
				q.Limit = n
			}
			if before != "" {
				id, err := uuid.Parse(before)
				if err != nil {
					return usagef("--before %q is not a dead letter ID: %v", before, err)
				}
				q.Before = id
			}
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				letters, err := in.DeadLetters(ctx, args[0], q)
				if err != nil {
					return err
				}
				more := len(letters) > n
				if more {
					letters = letters[:n]
				}
				return a.printDead(args[0], letters, more)
			})
		}),
	}
	c.Flags().IntVarP(&n, "n", "n", 20, fmt.Sprintf("how many letters to show, at most %d", inspect.MaxDeadLetterLimit))
	c.Flags().StringVar(&before, "before", "", "show only letters older than this dead letter ID (the next page)")
	return c
}

func (a *app) printDead(queue string, letters []shardqtype.TaskInfo, more bool) error {
	if a.json {
		for _, d := range letters {
			err := a.emit(map[string]any{"id": d.DeadLetterID, "task_id": d.ID, "queue": d.Queue, "died_at": d.FinishedAt.UTC(),
				"due_at": d.DueAt.UTC(), "priority": d.Priority, "attempt": d.Attempt, "deliveries": d.Token,
				"timeout_ms": ms(d.Timeout), "error": d.LastError, "headers": d.Headers, "kind": d.Kind, "payload": d.Payload})
			if err != nil {
				return err
			}
		}
		return nil
	}
	if len(letters) == 0 {
		_, err := fmt.Fprintf(a.stdout, "no dead letters in queue %s\n", queue)
		return err
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DIED\tID\tTASK\tKIND\tATTEMPTS\tERROR\tPAYLOAD")
	for _, d := range letters {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", utc(d.FinishedAt), d.DeadLetterID, d.ID, orDash(oneLine(d.Kind)), d.Attempt,
			oneLine(d.LastError), preview(d.Payload))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if more {
		_, err := fmt.Fprintf(a.stdout, "more: shardq dead list %s --before %s\n", queue, letters[len(letters)-1].DeadLetterID)
		return err
	}
	return nil
}

// oneLine shortens an error message to fit a table row.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > previewRunes {
		return string(r[:previewRunes]) + "..."
	}
	return s
}

func (a *app) deadActCmd(verb, short, done, doing string,
	one func(context.Context, *producer.Producer, string, uuid.UUID) (uuid.UUID, error),
	all func(*producer.Producer, context.Context, string, producer.BulkOptions) (int, error)) *cobra.Command {
	var id string
	var every, yes bool
	c := &cobra.Command{
		Use:   verb + " QUEUE (--id ID | --all)",
		Short: short,
		Example: fmt.Sprintf(`  shardq dead %s emails --id 5c2f0b3e-e66a-11f1-9a4c-0242ac120002
  shardq dead %s emails --all --yes`, verb, verb),
		Args: args("QUEUE"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			queue := args[0]
			if err := queueArg(queue); err != nil {
				return err
			}
			switch {
			case id == "" && !every:
				return usagef("say which letters: --id ID for one, or --all")
			case id != "" && every:
				return usagef("--id and --all exclude each other")
			case !every && yes:
				return usagef("--yes confirms --all; one letter needs no confirmation")
			}
			if every {
				return a.withSession(ctx, func(s *shardq.Driver) error {
					return a.deadAll(ctx, s, queue, verb, done, doing, yes, all)
				})
			}
			letter, err := uuid.Parse(id)
			if err != nil {
				return usagef("--id %q is not a dead letter ID (see 'shardq dead list %s'): %v", id, queue, err)
			}
			return a.withProducer(ctx, func(p *producer.Producer, _ *inspect.Inspector) error {
				task, err := one(ctx, p, queue, letter)
				if err != nil {
					return fmt.Errorf("%w; list the queue's dead letters with 'shardq dead list %s'", err, queue)
				}
				if a.json {
					m := map[string]any{"queue": queue, "id": letter, done: 1}
					if task != uuid.Nil {
						m["task_id"] = task
					}
					return a.emit(m)
				}
				if task != uuid.Nil {
					_, err = fmt.Fprintf(a.stdout, "%s dead letter %s: task %s is due now\n", done, letter, task)
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s dead letter %s\n", done, letter)
				return err
			})
		}),
	}
	f := c.Flags()
	f.StringVar(&id, "id", "", "the dead letter's ID (from 'shardq dead list')")
	f.BoolVar(&every, "all", false, "every dead letter of the queue, newest first")
	f.BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation of --all")
	return c
}

// deadAll counts the letters, asks for confirmation unless yes, and acts on them all
// with a progress bar.
func (a *app) deadAll(ctx context.Context, s *shardq.Driver, queue, verb, done, doing string, yes bool,
	all func(*producer.Producer, context.Context, string, producer.BulkOptions) (int, error)) error {
	total, err := countDead(ctx, s, queue)
	if err != nil {
		return err
	}
	p, err := producer.New(s, producer.Config{})
	if err != nil {
		return err
	}
	if total > 0 && !yes {
		if !a.terminal(a.stdin) {
			return usagef("%s --all acts on %s of queue %s: add --yes to confirm (standard input is not a terminal)", verb, letters(total), queue)
		}
		fmt.Fprintf(a.stderr, "%s %s of queue %s? [y/N] ", verb, letters(total), queue)
		answer, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return fmt.Errorf("not confirmed: nothing was %s", done)
		}
	}
	update, erase := a.progress(doing)
	opts := producer.BulkOptions{}
	if update != nil {
		opts.Progress = func(n int) { update(n, max(total, n)) }
	}
	n, err := all(p, ctx, queue, opts)
	erase()
	if err != nil {
		return fmt.Errorf("%s %s of queue %s, then: %w", done, letters(n), queue, err)
	}
	if a.json {
		return a.emit(map[string]any{"queue": queue, done: n})
	}
	_, err = fmt.Fprintf(a.stdout, "%s %s of queue %s\n", done, letters(n), queue)
	return err
}

func letters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return fmt.Sprintf("%d dead letters", n)
}

// countDead counts a queue's dead letters, reading their IDs only.
func countDead(ctx context.Context, s *shardq.Driver, queue string) (int, error) {
	in, err := inspect.New(s, inspect.Config{})
	if err != nil {
		return 0, err
	}
	return in.CountDeadLetters(ctx, queue)
}

// orDash stands in "-" for an empty table cell, so the columns stay apart.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
