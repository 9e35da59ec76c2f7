package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

func (a *app) taskCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "task",
		Short: "Show, cancel or reschedule one task, by ID or unique key",
		Long: `Show, cancel or reschedule one task, named by its ID, or by --queue and --key for a
task scheduled with a unique key.

A task is scheduled (waiting for its due time), in_flight (a consumer holds it until its
lease ends), retrying (delivered before, due again), dead (out of attempts; see 'shardq
dead'), or completed (acked, kept for the queue's completed retention).`,
	}
	c.AddCommand(a.taskGetCmd(), a.taskCancelCmd(), a.taskRescheduleCmd())
	return c
}

// taskRef is how a task command names its task: an ID argument, or --queue and --key.
type taskRef struct {
	queue, key string
	id         uuid.UUID
}

func (r *taskRef) flags(c *cobra.Command) {
	c.Flags().StringVar(&r.queue, "queue", "", "the queue of the task named by --key")
	c.Flags().StringVar(&r.key, "key", "", "the unique key of the task, in place of its ID (with --queue)")
	c.Args = func(cmd *cobra.Command, got []string) error {
		if r.key != "" || r.queue != "" {
			if r.key == "" || r.queue == "" {
				return usagef("--queue and --key go together: give both, or a task ID alone")
			}
			if len(got) > 0 {
				return usagef("give a task ID or --queue and --key, not both")
			}
			return queueArg(r.queue)
		}
		if err := args("ID")(cmd, got); err != nil {
			return err
		}
		id, err := uuid.Parse(got[0])
		if err != nil {
			return usagef("%q is not a task ID (a UUID such as 558d46fe-e663-11f1-af65-2746fecc3a46): %v", got[0], err)
		}
		r.id = id
		return nil
	}
}

func (r *taskRef) String() string {
	if r.key != "" {
		return fmt.Sprintf("the task of key %q in queue %s", r.key, r.queue)
	}
	return "task " + r.id.String()
}

// withProducer runs fn with a producer, and an inspector to read tasks back.
func (a *app) withProducer(ctx context.Context, fn func(*producer.Producer, *inspect.Inspector) error) error {
	return a.withSession(ctx, func(s *shardq.Driver) error {
		p, err := producer.New(s, producer.Config{})
		if err != nil {
			return err
		}
		in, err := inspect.New(s, inspect.Config{})
		if err != nil {
			return err
		}
		return fn(p, in)
	})
}

func (r *taskRef) get(ctx context.Context, in *inspect.Inspector) (*shardqtype.TaskInfo, error) {
	if r.key != "" {
		return in.TaskByKey(ctx, r.queue, r.key)
	}
	return in.Task(ctx, r.id)
}

// notFound explains shardqtype.ErrTaskNotFound.
func notFound(err error) error {
	if errors.Is(err, shardqtype.ErrTaskNotFound) {
		return fmt.Errorf("%w; a task is found while pending, in flight, dead, or completed within its queue's completed retention", err)
	}
	return err
}

func (a *app) taskGetCmd() *cobra.Command {
	var ref taskRef
	c := &cobra.Command{
		Use:   "get ID | --queue QUEUE --key KEY",
		Short: "Show a task's state, due time, attempts and payload",
		Example: `  shardq task get 558d46fe-e663-11f1-af65-2746fecc3a46
  shardq task get --queue emails --key welcome-42 --json`,
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return a.withInspector(ctx, func(in *inspect.Inspector) error {
				info, err := ref.get(ctx, in)
				if err != nil {
					return notFound(err)
				}
				return a.printTask(info)
			})
		}),
	}
	ref.flags(c)
	return c
}

func (a *app) printTask(t *shardqtype.TaskInfo) error {
	if a.json {
		return a.emit(taskJSON(t))
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "task\t%s\n", t.ID)
	fmt.Fprintf(w, "queue\t%s\n", t.Queue)
	if t.Key != "" {
		fmt.Fprintf(w, "key\t%s\n", t.Key)
	}
	if t.Kind != "" {
		fmt.Fprintf(w, "kind\t%s\n", oneLine(t.Kind))
	}
	fmt.Fprintf(w, "state\t%s\n", t.State)
	switch t.State {
	case shardqtype.TaskScheduled, shardqtype.TaskRetrying:
		fmt.Fprintf(w, "due\t%s\n", utc(t.DueAt))
	case shardqtype.TaskInFlight:
		fmt.Fprintf(w, "lease deadline\t%s\n", utc(t.Deadline))
	case shardqtype.TaskDead, shardqtype.TaskCompleted:
		fmt.Fprintf(w, "finished\t%s\n", utc(t.FinishedAt))
	}
	if t.State != shardqtype.TaskDead && t.State != shardqtype.TaskCompleted {
		fmt.Fprintf(w, "priority\t%d\n", t.Priority)
	}
	fmt.Fprintf(w, "attempts\t%d (deliveries ever: %d)\n", t.Attempt, t.Token)
	if t.LastError != "" {
		fmt.Fprintf(w, "last error\t%s\n", t.LastError)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Headers)) {
		fmt.Fprintf(w, "header %s\t%s\n", oneLine(k), oneLine(t.Headers[k]))
	}
	if t.Payload != nil {
		fmt.Fprintf(w, "payload\t%s\n", preview(t.Payload))
	}
	return w.Flush()
}

// taskJSON is a task for --json: times in UTC, the payload in base64, empty fields left out.
func taskJSON(t *shardqtype.TaskInfo) map[string]any {
	m := map[string]any{"id": t.ID, "queue": t.Queue, "state": t.State.String(), "attempt": t.Attempt, "deliveries": t.Token}
	if t.Key != "" {
		m["key"] = t.Key
	}
	if t.Kind != "" {
		m["kind"] = t.Kind
	}
	for name, at := range map[string]time.Time{"due_at": t.DueAt, "deadline": t.Deadline, "finished_at": t.FinishedAt} {
		if !at.IsZero() {
			m[name] = at.UTC()
		}
	}
	if t.State != shardqtype.TaskDead && t.State != shardqtype.TaskCompleted {
		m["priority"] = t.Priority
	}
	if t.LastError != "" {
		m["last_error"] = t.LastError
	}
	if t.Headers != nil {
		m["headers"] = t.Headers
	}
	if t.Payload != nil {
		m["payload"] = t.Payload
	}
	return m
}

func (a *app) taskCancelCmd() *cobra.Command {
	var ref taskRef
	var afterLease bool
	c := &cobra.Command{
		Use:   "cancel ID | --queue QUEUE --key KEY",
		Short: "Cancel a pending or retrying task, so that it is never delivered again",
		Long: `Cancel a pending or retrying task, so that it is never delivered again. A task a
consumer holds is not cancelled unless --after-lease is given: then its current delivery
runs on, but it is never delivered again (its consumer's ack or retry fails).`,
		Example: `  shardq task cancel 558d46fe-e663-11f1-af65-2746fecc3a46
  shardq task cancel --queue emails --key welcome-42 --after-lease`,
		RunE: a.command(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return a.withProducer(ctx, func(p *producer.Producer, in *inspect.Inspector) error {
				opts := producer.CancelOptions{AfterLease: afterLease}
				id := ref.id
				var err error
				if ref.key != "" {
					var info *shardqtype.TaskInfo
					if info, err = in.TaskByKey(ctx, ref.queue, ref.key); err != nil {
						return notFound(err)
					}
					id = info.ID
				}
				err = p.Cancel(ctx, id, opts)
				if errors.Is(err, shardqtype.ErrTaskInFlight) {
					return fmt.Errorf("%w; add --after-lease to cancel it once this delivery ends", err)
				}
				if err != nil {
					return notFound(err)
				}
				if a.json {
					return a.emit(map[string]any{"id": id, "cancelled": true})
				}
				_, err = fmt.Fprintf(a.stdout, "cancelled task %s\n", id)
				return err
			})
		}),
	}
	ref.flags(c)
	c.Flags().BoolVar(&afterLease, "after-lease", false, "cancel a task in flight too: its current delivery is its last")
	return c
}

func (a *app) taskRescheduleCmd() *cobra.Command {
	var ref taskRef
	var in time.Duration
	var at string
	var priority int
	c := &cobra.Command{
		Use:   "reschedule ID | --queue QUEUE --key KEY  (--in D | --at TIME | --priority P)",
		Short: "Move a pending or retrying task to a new due time, priority or both",
		Long: `Move a pending or retrying task to a new due time, priority or both. The move is atomic
for consumers: the task is delivered once, at its new time. A task a consumer holds
cannot be rescheduled.`,
		Example: `  shardq task reschedule 558d46fe-e663-11f1-af65-2746fecc3a46 --in 1h
  shardq task reschedule --queue emails --key welcome-42 --at 2026-11-23T09:00:00Z --priority 9`,
		RunE: a.command(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			var opts producer.RescheduleOptions
			f := cmd.Flags()
			switch {
			case !f.Changed("in") && !f.Changed("at") && !f.Changed("priority"):
				return usagef("nothing to change: give --in, --at or --priority")
			case in < 0:
				return usagef("--in %v is negative: give how long from now, such as 5m", in)
			case f.Changed("at"):
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usagef("--at %q is not an RFC 3339 time such as 2026-11-23T02:00:00Z: %v", at, err)
				}
				opts.DueAt = t
			case f.Changed("in"):
				opts.DueAt = time.Now().Add(in)
			}
			if f.Changed("priority") {
				if priority < shardqtype.MinPriority || priority > shardqtype.MaxPriority {
					return usagef("--priority %d is not in [%d, %d]", priority, shardqtype.MinPriority, shardqtype.MaxPriority)
				}
				opts.Priority = &priority
			}
			return a.withProducer(ctx, func(p *producer.Producer, in *inspect.Inspector) error {
				var err error
				if ref.key != "" {
					err = p.RescheduleByKey(ctx, ref.queue, ref.key, opts)
				} else {
					err = p.Reschedule(ctx, ref.id, opts)
				}
				if errors.Is(err, shardqtype.ErrTaskInFlight) {
					return fmt.Errorf("%w; wait for its delivery to end, or cancel it with 'shardq task cancel --after-lease'", err)
				}
				if err != nil {
					return notFound(err)
				}
				info, err := ref.get(ctx, in)
				if err != nil {
					return fmt.Errorf("%s was rescheduled, but reading it back failed: %w", &ref, err)
				}
				if a.json {
					return a.emit(taskJSON(info))
				}
				_, err = fmt.Fprintf(a.stdout, "rescheduled task %s: %s, due %s, priority %d\n", info.ID, info.State, utc(info.DueAt), info.Priority)
				return err
			})
		}),
	}
	ref.flags(c)
	f := c.Flags()
	f.DurationVar(&in, "in", 0, "due this long from now, such as 90s or 5m")
	f.StringVar(&at, "at", "", "due at this RFC 3339 time, such as 2026-11-23T02:00:00Z")
	f.IntVar(&priority, "priority", 0, fmt.Sprintf("the new priority, %d to %d", shardqtype.MinPriority, shardqtype.MaxPriority))
	c.MarkFlagsMutuallyExclusive("in", "at")
	return c
}
