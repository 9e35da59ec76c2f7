package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

func (a *app) scheduleCmd() *cobra.Command {
	var payload, at, key string
	var headers []string
	var in, timeout time.Duration
	var priority int
	c := &cobra.Command{
		Use:   "schedule QUEUE --payload @FILE|-|TEXT",
		Short: "Schedule one task",
		Long: `Schedule one task, due now, after --in, or at --at, and print its ID.

--payload @FILE reads the payload from FILE, --payload - from standard input, and any
other value is the payload itself. A task due in the past is due now. With --key, the
task is scheduled only if no other task of the queue holds that key while pending, in
flight or retrying; otherwise the command fails naming the task that holds it. Each
--header NAME=VALUE adds a header, which 'shardq task get' shows and handlers read.`,
		Example: `  shardq schedule emails --payload @mail.json --in 5m
  echo '{"to":"alice"}' | shardq schedule emails --payload - --priority 9
  shardq schedule reports --payload nightly --at 2026-11-23T02:00:00Z
  shardq schedule emails --payload @welcome.json --key welcome-42
  shardq schedule emails --payload hi --header tenant=acme --header origin=cli`,
		Args: args("QUEUE"),
		RunE: a.command(func(ctx context.Context, cmd *cobra.Command, args []string) error {
			if err := queueArg(args[0]); err != nil {
				return err
			}
			task := producer.Task{Queue: args[0], Priority: priority, Timeout: timeout, Key: key}
			switch {
			case in < 0:
				return usagef("--in %v is negative: give how long from now, such as 5m (or leave it out for now)", in)
			case priority < shardqtype.MinPriority || priority > shardqtype.MaxPriority:
				return usagef("--priority %d is not in [%d, %d]", priority, shardqtype.MinPriority, shardqtype.MaxPriority)
			case timeout < 0:
				return usagef("--timeout %v is negative", timeout)
			case cmd.Flags().Changed("at"):
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usagef("--at %q is not an RFC 3339 time such as 2026-11-23T02:00:00Z: %v", at, err)
				}
				task.DueAt = t
			case in > 0:
				task.DueAt = time.Now().Add(in)
			}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usagef("--header %q is not NAME=VALUE", h)
				}
				if task.Headers == nil {
					task.Headers = map[string]string{}
				}
				task.Headers[k] = v
			}
			var err error
			if task.Payload, err = a.readPayload(payload); err != nil {
				return err
			}
			return a.withSession(ctx, func(s *shardq.Driver) error {
				p, err := producer.New(s, producer.Config{})
				if err != nil {
					return err
				}
				id, err := p.ScheduleTask(ctx, task)
				var dup *producer.DuplicateError
				if errors.As(err, &dup) {
					return fmt.Errorf("key %q is held by task %s of queue %s: nothing was scheduled; see that task with 'shardq task get %s'",
						dup.Key, dup.ExistingID, dup.Queue, dup.ExistingID)
				}
				if err != nil {
					return err
				}
				due := task.DueAt
				if due.IsZero() {
					due = time.Now()
				}
				if a.json {
					m := map[string]any{"id": id, "queue": task.Queue, "due_at": due.UTC(), "priority": task.Priority}
					if key != "" {
						m["key"] = key
					}
					return a.emit(m)
				}
				_, err = fmt.Fprintf(a.stdout, "scheduled %s on queue %s, due %s, priority %d\n", id, task.Queue, utc(due), task.Priority)
				return err
			})
		}),
	}
	f := c.Flags()
	f.StringVar(&payload, "payload", "", "the payload: @FILE, - for standard input, or the text itself (required)")
	f.DurationVar(&in, "in", 0, "due this long from now, such as 90s or 5m (default: now)")
	f.StringVar(&at, "at", "", "due at this RFC 3339 time, such as 2026-11-23T02:00:00Z")
	f.IntVar(&priority, "priority", 0, fmt.Sprintf("priority, %d to %d: higher runs first among due tasks", shardqtype.MinPriority, shardqtype.MaxPriority))
	f.StringVar(&key, "key", "", "a unique key: no other task of the queue may hold it while pending, in flight or retrying")
	f.DurationVar(&timeout, "timeout", 0, "how long a consumer has to ack the task (default: the queue's)")
	f.StringArrayVar(&headers, "header", nil, "a header NAME=VALUE, kept with the task; repeat for more")
	_ = c.MarkFlagRequired("payload")
	c.MarkFlagsMutuallyExclusive("in", "at")
	return c
}

// readPayload reads --payload: @FILE, - for standard input, or the text itself.
func (a *app) readPayload(v string) ([]byte, error) {
	switch {
	case v == "-":
		b, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, usagef("--payload -: reading standard input: %v", err)
		}
		return b, nil
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, usagef("--payload %s: %v", v, err)
		}
		return b, nil
	}
	return []byte(v), nil
}
