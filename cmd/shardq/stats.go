package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/shardqtype"
)

// minInterval keeps --watch from hammering the cluster: each refresh reads every
// partition of the lap.
const minInterval = 500 * time.Millisecond

func (a *app) statsCmd() *cobra.Command {
	var watch, full bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "stats QUEUE",
		Short: "Count what a queue holds: due, due again, scheduled, in flight, retrying, by shard",
		Long: `Count the task rows of one lap of the queue, by concurrency shard:

  DUE        visible now, never delivered
  DUE AGAIN  visible now, delivered before: its lease ran out, or a retry came due
  SCHEDULED  becoming visible later in this lap (tasks due further ahead are not read)
  IN FLIGHT  delivered and leased until their deadline
  RETRYING   failed, waiting out a retry delay

and how long the oldest due task has been visible (the queue's current lateness), and
the dead letters kept (the last 31 days).

Cost: each pass reads every partition of the lap once, buckets x shards of them (960
for the default 120 x 8), with two requests each (its lock row's read floors, then its
rows from those floors up to one lap ahead, in pages of 5,000), plus 31 requests for dead
letters. Rows are counted as they stream in: memory stays small whatever the queue holds,
and the time grows with the rows pending in the lap (see docs/operations.md
for figures). Nothing is written and no lock is taken.

--full reads each partition from its start instead of from the consumers' read floors,
and counts the due rows that lie below them (BEHIND FLOORS): consumers do not read those.
It also walks the tombstones of every task consumed in the last gc_grace_seconds (10
minutes), so it costs more, and a partition drained of more than 100,000 tasks in that
time fails with a tombstone error.`,
		Example: `  shardq stats emails
  shardq stats emails --watch --interval 10s
  shardq stats emails --json | jq .total`,
		Args: args("QUEUE"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			if watch && interval < minInterval {
				return usagef("--interval %v is too short: each refresh reads the whole lap; give %v or more", interval, minInterval)
			}
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				info, err := in.Queue(ctx, args[0])
				if err != nil {
					return err
				}
				q := info.Config
				opts := inspect.StatsOptions{Full: full}
				if !watch {
					return a.statsPass(ctx, in, q, opts, false)
				}
				for {
					err := a.statsPass(ctx, in, q, opts, true)
					if ctx.Err() != nil {
						return nil // interrupted: the normal end of --watch
					}
					if err != nil {
						fmt.Fprintf(a.stderr, "shardq: %v\n", a.explain(err))
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(interval):
					}
				}
			})
		}),
	}
	f := c.Flags()
	f.BoolVarP(&watch, "watch", "w", false, "count again every --interval until interrupted")
	f.DurationVar(&interval, "interval", 5*time.Second, "time between passes of --watch")
	f.BoolVar(&full, "full", false, "read partitions from their start, past the consumers' read floors (costs more; see above)")
	return c
}

// statsPass counts once and prints the result. Partitions that could not be read make
// it fail once the rest is printed.
func (a *app) statsPass(ctx context.Context, in *inspect.Inspector, q shardqtype.QueueConfig, opts inspect.StatsOptions, refresh bool) error {
	var erase func()
	opts.Progress, erase = a.progress("counting")
	t0 := time.Now()
	st, err := in.Stats(ctx, q.Name, opts)
	erase()
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	if a.json {
		err = a.emit(statsJSON(q, st, elapsed))
	} else {
		if refresh && a.terminal(a.stdout) {
			fmt.Fprint(a.stdout, "\033[H\033[2J") // a fresh screen for each pass
		}
		err = a.printStats(q, st, elapsed, opts.Full)
		if refresh {
			fmt.Fprintln(a.stdout)
		}
	}
	if err != nil {
		return err
	}
	if n := len(st.Failed); n > 0 {
		return fmt.Errorf("%d of %d partitions could not be read, and their rows are not counted; the first: %w",
			n, st.Partitions+st.DeadDays, st.Failed[0])
	}
	return nil
}

func (a *app) printStats(q shardqtype.QueueConfig, st *inspect.Stats, elapsed time.Duration, full bool) error {
	fmt.Fprintf(a.stdout, "queue %s at %s (lap %v: %d buckets x %v, %d shards)\n",
		q.Name, utc(st.At), st.Layout.Lap(), q.BucketCount, q.BucketDuration, q.ShardCount)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	header := "SHARD\tDUE\tDUE AGAIN\tSCHEDULED\tIN FLIGHT\tRETRYING\t"
	if full {
		header += "BEHIND FLOORS\t"
	}
	fmt.Fprintln(w, header)
	row := func(name string, c inspect.Counts) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t", name, c.Due, c.DueAgain, c.Scheduled, c.InFlight, c.Retrying)
		if full {
			fmt.Fprintf(w, "%d\t", c.BehindFloors)
		}
		fmt.Fprintln(w)
	}
	for i, c := range st.Shards {
		row(fmt.Sprint(i), c)
	}
	if st.Draining != (inspect.Counts{}) {
		row("draining", st.Draining) // the layouts a resize left, until they are empty
	}
	row("total", st.Total)
	if err := w.Flush(); err != nil {
		return err
	}
	if st.OldestDue.IsZero() {
		fmt.Fprintln(a.stdout, "oldest due task: none due")
	} else {
		fmt.Fprintf(a.stdout, "oldest due task: visible for %s (since %s)\n", age(st.At.Sub(st.OldestDue)), utc(st.OldestDue))
	}
	fmt.Fprintf(a.stdout, "dead letters (last %d days): %d\n", st.DeadDays, st.DeadLetters)
	_, err := fmt.Fprintf(a.stdout, "read %d partitions, %d rows in %s\n", st.Partitions, st.RowsRead, age(elapsed))
	return err
}

// statsJSON is one pass for --json.
func statsJSON(q shardqtype.QueueConfig, st *inspect.Stats, elapsed time.Duration) map[string]any {
	type shardCounts struct {
		Shard int `json:"shard"`
		inspect.Counts
	}
	shards := make([]shardCounts, len(st.Shards))
	for i, c := range st.Shards {
		shards[i] = shardCounts{Shard: i, Counts: c}
	}
	failed := make([]map[string]string, 0, len(st.Failed))
	for _, f := range st.Failed {
		failed = append(failed, map[string]string{"partition_key": f.PartitionKey, "error": f.Err.Error()})
	}
	m := map[string]any{
		"queue": q.Name, "at": st.At.UTC(), "lap_ms": ms(st.Layout.Lap()), "shards": shards, "draining": st.Draining, "total": st.Total,
		"oldest_due_at": nil, "oldest_due_age_ms": nil, "dead_letters": st.DeadLetters, "dead_letter_days": st.DeadDays,
		"partitions": st.Partitions, "rows_read": st.RowsRead, "elapsed_ms": ms(elapsed), "failed": failed,
	}
	if !st.OldestDue.IsZero() {
		m["oldest_due_at"] = st.OldestDue.UTC()
		m["oldest_due_age_ms"] = ms(st.At.Sub(st.OldestDue))
	}
	return m
}
