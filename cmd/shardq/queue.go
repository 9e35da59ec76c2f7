package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/shardqtype"
)

func (a *app) queueCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "queue",
		Short: "Create queues, show their stored settings, pause and resume them",
	}
	c.AddCommand(a.queueCreateCmd(), a.queueListCmd(), a.queueShowCmd(),
		a.queuePauseCmd("pause", shardq.PauseQueue, shardqtype.SettingsRefresh,
			"paused: workers take none of its tasks from at most %v from now; tasks in flight finish, and producers keep scheduling\n"),
		// A worker that found the queue paused looks again every SettingsRefresh.
		a.queuePauseCmd("resume", shardq.ResumeQueue, 2*shardqtype.SettingsRefresh, "resumed: workers take its tasks again within %v\n"),
		a.queueResizeCmd())
	return c
}

func (a *app) queueResizeCmd() *cobra.Command {
	var cfg shardqtype.LayoutConfig
	c := &cobra.Command{
		Use:   "resize NAME",
		Short: "Change a live queue's layout: its shards, buckets or bucket duration",
		Long: `Change the layout of a live queue without losing a task. The new layout takes
effect at a bucket boundary at least ` + shardqtype.LayoutLead.String() + ` from now, which this prints, so
that every producer and consumer has read it; tasks written under the old layout
(due later, in flight or retrying) are still delivered from it, and consumers stop
reading it once a full read finds it empty. A second change while the last has yet to
take effect is refused, naming when it can be made. Flags not given keep the current
value.`,
		Example: `  shardq queue resize emails --shards 16
  shardq queue resize reports --buckets 600 --bucket 1s`,
		Args: args("NAME"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			return a.withSession(ctx, func(s *shardq.Driver) error {
				ch, err := shardq.ChangeLayout(ctx, s, args[0], cfg)
				if errors.Is(err, shardqtype.ErrInvalid) {
					return &usageError{err}
				}
				if err != nil {
					return err
				}
				if a.json {
					return a.emit(map[string]any{"name": args[0], "generation": ch.Generation, "takes_effect_at": ch.From.UTC()})
				}
				if !ch.From.After(time.Now()) {
					_, err = fmt.Fprintf(a.stdout, "queue %s already has this layout (layout %d)\n", args[0], ch.Generation)
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "queue %s: layout %d takes effect at %s\n", args[0], ch.Generation, utc(ch.From))
				return err
			})
		}),
	}
	f := c.Flags()
	f.IntVar(&cfg.ShardCount, "shards", 0, "concurrency shards (default: unchanged)")
	f.IntVar(&cfg.BucketCount, "buckets", 0, "time shards in one lap of the ring (default: unchanged)")
	f.DurationVar(&cfg.BucketDuration, "bucket", 0, "how long each time shard collects due tasks (default: unchanged)")
	return c
}

func (a *app) queueCreateCmd() *cobra.Command {
	var cfg shardqtype.QueueConfig
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue, or check an existing one's settings",
		Long: `Create a queue with the settings given (defaults for the others). Settings are
stored and cannot change: when the queue exists with the same settings, this succeeds
and says so; with other settings, it fails and names the first that differs.

One lap of the ring, buckets x bucket, should exceed the schema's gc_grace_seconds
(10 minutes) so tombstones are purged before consumers come back; --timeout must be
shorter than the lap less one bucket.`,
		Example: `  shardq queue create emails
  shardq queue create reports --shards 4 --buckets 150 --bucket 5s --timeout 2m`,
		Args: args("NAME"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			cfg.Name = args[0]
			if err := queueArg(cfg.Name); err != nil {
				return err
			}
			// The flags' defaults are the library's: a zero given is rejected, not defaulted.
			if err := cfg.Validate(); err != nil {
				return &usageError{err}
			}
			return a.withSession(ctx, func(s *shardq.Driver) error {
				_, err := shardq.LoadQueue(ctx, s, cfg.Name)
				existed := err == nil
				if err != nil && !errors.Is(err, shardqtype.ErrQueueNotFound) {
					return err
				}
				q, err := shardq.CreateQueue(ctx, s, cfg)
				var mismatch *shardqtype.QueueMismatchError
				if errors.As(err, &mismatch) {
					return fmt.Errorf("%w; settings cannot change: create a queue of another name, or see 'shardq queue show %s'", err, cfg.Name)
				}
				if err != nil {
					return err
				}
				info := inspect.QueueInfo{Config: q}
				if existed {
					// It may have been paused since.
					in, err := inspect.New(s, inspect.Config{})
					if err != nil {
						return err
					}
					if info, err = in.Queue(ctx, q.Name); err != nil {
						return err
					}
				}
				if a.json {
					return a.emit(map[string]any{"created": !existed, "queue": queueJSON(info)})
				}
				verb := "created"
				if existed {
					verb = "exists already, with these settings"
				}
				fmt.Fprintf(a.stdout, "queue %s %s\n", q.Name, verb)
				return a.showQueue(info)
			})
		}),
	}
	f := c.Flags()
	f.IntVar(&cfg.ShardCount, "shards", shardqtype.DefaultShardCount, "concurrency shards: the most consumers that take tasks at once without contending")
	f.IntVar(&cfg.BucketCount, "buckets", shardqtype.DefaultBucketCount, "time shards in one lap of the ring")
	f.DurationVar(&cfg.BucketDuration, "bucket", shardqtype.DefaultBucketDuration, "how long each time shard collects due tasks")
	f.DurationVar(&cfg.DefaultTimeout, "timeout", shardqtype.DefaultTimeout, "how long a consumer has to ack a task before it is delivered again, unless the task sets its own")
	f.DurationVar(&cfg.LockTTL, "lock-ttl", shardqtype.DefaultLockTTL, "how long a shard lock outlives a consumer that died holding it (whole seconds)")
	return c
}

func (a *app) queueListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the queues of the keyspace with their settings",
		Args:  args(),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				qs, err := in.Queues(ctx)
				if err != nil {
					return err
				}
				if a.json {
					for _, q := range qs {
						if err := a.emit(queueJSON(q)); err != nil {
							return err
						}
					}
					return nil
				}
				if len(qs) == 0 {
					_, err := fmt.Fprintf(a.stdout, "no queues in keyspace %s; create one with 'shardq queue create NAME'\n", a.keyspace)
					return err
				}
				w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSHARDS\tBUCKETS\tBUCKET\tLAP\tTIMEOUT\tLOCK TTL\tSTATE\tCREATED")
				for _, q := range qs {
					c := q.Config
					fmt.Fprintf(w, "%s\t%d\t%d\t%v\t%v\t%v\t%v\t%s\t%s\n", c.Name, c.ShardCount, c.BucketCount, c.BucketDuration,
						c.Layout().Lap(), c.DefaultTimeout, c.LockTTL, state(q), created(q.CreatedAt))
				}
				return w.Flush()
			})
		}),
	}
}

func (a *app) queueShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a queue's stored settings",
		Args:  args("NAME"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				q, err := in.Queue(ctx, args[0])
				if err != nil {
					return err
				}
				if a.json {
					return a.emit(queueJSON(q))
				}
				return a.showQueue(q)
			})
		}),
	}
}

func (a *app) showQueue(q inspect.QueueInfo) error {
	c := q.Config
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "name\t%s\n", c.Name)
	fmt.Fprintf(w, "shards\t%d\n", c.ShardCount)
	fmt.Fprintf(w, "buckets\t%d x %v (one lap: %v)\n", c.BucketCount, c.BucketDuration, c.Layout().Lap())
	fmt.Fprintf(w, "default timeout\t%v (at most %v)\n", c.DefaultTimeout, c.MaxTimeout())
	fmt.Fprintf(w, "lock ttl\t%v\n", c.LockTTL)
	fmt.Fprintf(w, "state\t%s\n", state(q))
	if !q.CreatedAt.IsZero() {
		fmt.Fprintf(w, "created\t%s\n", created(q.CreatedAt))
	}
	// Shards and buckets above are the ones the queue was created with; a resize adds
	// a layout, read until it is drained.
	for _, l := range q.Layouts[min(1, len(q.Layouts)):] {
		var status string
		switch {
		case l.Drained:
			status = "drained"
		case !l.From.After(time.Now()):
			status = "from " + utc(l.From)
		default:
			status = "takes effect at " + utc(l.From)
		}
		fmt.Fprintf(w, "layout %d\t%d shards, %d x %v (%s)\n", l.Layout.Generation, l.Layout.ShardCount, l.Layout.BucketCount, l.Layout.BucketDuration, status)
	}
	if len(q.Layouts) > 0 && q.Layouts[0].Drained {
		fmt.Fprintf(w, "layout 0\tdrained\n")
	}
	return w.Flush()
}

// queuePauseCmd is 'queue pause' or 'queue resume': it calls set, and says the change
// takes effect within.
func (a *app) queuePauseCmd(verb string, set func(context.Context, *shardq.Driver, string) error, within time.Duration, done string) *cobra.Command {
	short := map[string]string{
		"pause":  "Stop every worker taking a queue's tasks; producers keep scheduling",
		"resume": "Let workers take a paused queue's tasks again",
	}[verb]
	return &cobra.Command{
		Use:     verb + " NAME",
		Short:   short,
		Example: "  shardq queue " + verb + " emails",
		Args:    args("NAME"),
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			return a.withSession(ctx, func(s *shardq.Driver) error {
				if err := set(ctx, s, args[0]); err != nil {
					return err
				}
				if a.json {
					return a.emit(map[string]any{"name": args[0], "paused": verb == "pause", "within_ms": ms(within)})
				}
				_, err := fmt.Fprintf(a.stdout, "queue %s "+done, args[0], within)
				return err
			})
		}),
	}
}

func state(q inspect.QueueInfo) string {
	if q.Paused {
		return "paused"
	}
	return "running"
}

func created(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return utc(t)
}

// queueJSON is a queue's settings for --json: durations in milliseconds.
func queueJSON(q inspect.QueueInfo) map[string]any {
	c := q.Config
	m := map[string]any{
		"name": c.Name, "shard_count": c.ShardCount, "bucket_count": c.BucketCount,
		"bucket_duration_ms": ms(c.BucketDuration), "lap_ms": ms(c.Layout().Lap()),
		"default_timeout_ms": ms(c.DefaultTimeout), "max_timeout_ms": ms(c.MaxTimeout()), "lock_ttl_ms": ms(c.LockTTL),
		"paused": q.Paused,
	}
	if !q.CreatedAt.IsZero() {
		m["created_at"] = q.CreatedAt.UTC()
	}
	return m
}
