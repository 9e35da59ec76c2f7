package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/series"
)

func (a *app) seriesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "series",
		Short: "List, pause, resume and delete recurring series",
		Long: `Recurring series are created by programs with package series; these commands show
and steer them. Pausing cancels a series' pending occurrence (one in flight finishes);
resuming schedules the next one still in the future; deleting removes the series and
cancels its pending occurrence.`,
	}
	c.AddCommand(a.seriesListCmd(),
		a.seriesActCmd("pause", "Stop a series from scheduling occurrences", "paused", (*series.Client).Pause),
		a.seriesActCmd("resume", "Let a paused series schedule occurrences again", "resumed", (*series.Client).Resume),
		a.seriesActCmd("delete", "Delete a series and cancel its pending occurrence", "deleted", (*series.Client).Delete))
	return c
}

func (a *app) seriesListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list QUEUE [NAME]",
		Short:   "List a queue's series, or show one",
		Example: "  shardq series list reports\n  shardq series list reports nightly",
		Args: func(cmd *cobra.Command, got []string) error {
			if len(got) == 2 {
				return args("QUEUE", "NAME")(cmd, got)
			}
			return args("QUEUE")(cmd, got)
		},
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			return a.withSeries(ctx, args[0], func(c *series.Client) error {
				var list []*series.Info
				if len(args) == 2 {
					in, err := c.Get(ctx, args[0], args[1])
					if err != nil {
						return err
					}
					list = []*series.Info{in}
				} else {
					var err error
					if list, err = c.List(ctx, args[0]); err != nil {
						return err
					}
				}
				if a.json {
					for _, in := range list {
						if err := a.emit(seriesJSON(in)); err != nil {
							return err
						}
					}
					return nil
				}
				if len(list) == 0 {
					_, err := fmt.Fprintf(a.stdout, "no series in queue %s\n", args[0])
					return err
				}
				w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSCHEDULE\tSTATE\tRUNS\tNEXT")
				for _, in := range list {
					next := "-"
					if !in.NextAt.IsZero() {
						next = utc(in.NextAt)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", in.Name, schedule(in), seriesState(in), in.Occurrences, next)
				}
				return w.Flush()
			})
		}),
	}
}

func (a *app) seriesActCmd(verb, short, done string, act func(*series.Client, context.Context, string, string) error) *cobra.Command {
	return &cobra.Command{
		Use:     verb + " QUEUE NAME",
		Short:   short,
		Example: "  shardq series " + verb + " reports nightly",
		Args:    args("QUEUE", "NAME"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			return a.withSeries(ctx, args[0], func(c *series.Client) error {
				if err := act(c, ctx, args[0], args[1]); err != nil {
					return err
				}
				if a.json {
					return a.emit(map[string]any{"queue": args[0], "name": args[1], done: true})
				}
				_, err := fmt.Fprintf(a.stdout, "series %s of queue %s %s\n", args[1], args[0], done)
				return err
			})
		}),
	}
}

// withSeries runs fn with a series client, and says what to do when the series is not
// there.
func (a *app) withSeries(ctx context.Context, queue string, fn func(*series.Client) error) error {
	return a.withSession(ctx, func(s *shardq.Driver) error {
		c, err := series.New(s, series.Config{})
		if err != nil {
			return err
		}
		err = fn(c)
		if errors.Is(err, series.ErrNotFound) {
			return fmt.Errorf("%w; list the queue's series with 'shardq series list %s'", err, queue)
		}
		return err
	})
}

func schedule(in *series.Info) string {
	if in.Cron == "" {
		return "every " + in.Every.String()
	}
	tz := in.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("cron %q %s", in.Cron, tz)
}

func seriesState(in *series.Info) string {
	switch {
	case in.Ended:
		return "ended"
	case in.Paused:
		return "paused"
	}
	return "active"
}

// seriesJSON is a series for --json: durations in milliseconds.
func seriesJSON(in *series.Info) map[string]any {
	m := map[string]any{"queue": in.Queue, "name": in.Name, "state": seriesState(in), "occurrences": in.Occurrences,
		"priority": in.Priority, "created_at": in.CreatedAt.UTC()}
	if in.Cron != "" {
		m["cron"], m["time_zone"] = in.Cron, in.TimeZone
	} else {
		m["every_ms"] = ms(in.Every)
	}
	if !in.NextAt.IsZero() {
		m["next_at"], m["next_id"] = in.NextAt.UTC(), in.NextID.String()
	}
	return m
}
