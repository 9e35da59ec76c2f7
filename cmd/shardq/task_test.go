package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
)

var idPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// The task commands show, reschedule and cancel one task, by ID or by unique key, and
// schedule --key refuses a key another task holds.
func TestTaskCommands(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.ok("queue", "create", "emails")

	out := c.ok("schedule", "emails", "--payload", "hello", "--key", "welcome-42", "--in", "1h",
		"--header", "tenant=acme", "--header", "note=a=b")
	require.Regexp(t, `^scheduled \S+ on queue emails, due \S+, priority 0\n$`, out)
	id := idPattern.FindString(out)
	r := c.fails(exitFailed, []string{"schedule", "emails", "--payload", "again", "--key", "welcome-42"},
		`key "welcome-42" is held by task `+id+` of queue emails: nothing was scheduled; see that task with 'shardq task get `+id+`'`)
	require.Empty(t, r.stdout)
	c.fails(exitUsage, []string{"schedule", "emails", "--payload", "x", "--key", strings.Repeat("k", 600)}, "Key", "Nothing was written")

	get := c.ok("task", "get", id)
	require.Regexp(t, `(?m)^task\s+`+id+`$`, get)
	require.Regexp(t, `(?m)^key\s+welcome-42$`, get)
	require.Regexp(t, `(?m)^state\s+scheduled$`, get)
	require.Regexp(t, `(?m)^payload\s+"hello"$`, get)
	require.Regexp(t, `(?m)^header note\s+a=b\n^header tenant\s+acme$`, get)
	byKey := jsonLines(t, c.ok("--json", "task", "get", "--queue", "emails", "--key", "welcome-42"))
	require.Len(t, byKey, 1)
	require.Equal(t, id, byKey[0]["id"])
	require.Equal(t, "scheduled", byKey[0]["state"])
	require.Equal(t, "aGVsbG8=", byKey[0]["payload"], "base64 of the payload")
	require.Equal(t, map[string]any{"tenant": "acme", "note": "a=b"}, byKey[0]["headers"])
	due, err := time.Parse(time.RFC3339Nano, byKey[0]["due_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), due, time.Minute)

	out = c.ok("task", "reschedule", id, "--in", "2h", "--priority", "7")
	require.Regexp(t, `^rescheduled task `+id+`: scheduled, due \S+, priority 7\n$`, out)
	moved := jsonLines(t, c.ok("--json", "task", "reschedule", "--queue", "emails", "--key", "welcome-42", "--priority", "3"))
	require.Equal(t, 3.0, moved[0]["priority"])
	due, err = time.Parse(time.RFC3339Nano, moved[0]["due_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), due, time.Minute, "a priority change keeps the due time")

	require.Equal(t, "cancelled task "+id+"\n", c.ok("task", "cancel", "--queue", "emails", "--key", "welcome-42"))
	c.fails(exitFailed, []string{"task", "get", id}, "task not found")
	c.fails(exitFailed, []string{"task", "cancel", id}, "task not found")
	c.fails(exitFailed, []string{"task", "get", "--queue", "emails", "--key", "welcome-42"}, "task not found")

	// A task a consumer holds is cancelled only with --after-lease.
	held := idPattern.FindString(c.ok("schedule", "emails", "--payload", "busy"))
	cons, err := consumer.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), consumer.Config{Queue: "emails"})
	require.NoError(t, err)
	ctx := context.Background()
	var got []*consumer.Task
	require.Eventually(t, func() bool {
		got, err = cons.AcquireTasks(ctx, 1)
		require.NoError(t, err)
		return len(got) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, held, got[0].ID.String())
	require.Regexp(t, `(?m)^state\s+in_flight$`, c.ok("task", "get", held))
	c.fails(exitFailed, []string{"task", "cancel", held}, "is in flight", "--after-lease")
	c.fails(exitFailed, []string{"task", "reschedule", held, "--in", "1m"}, "is in flight", "--after-lease")
	require.Equal(t, []map[string]any{{"id": held, "cancelled": true}}, jsonLines(t, c.ok("--json", "task", "cancel", held, "--after-lease")))
	require.True(t, errors.Is(cons.AckTasks(ctx, got[0]), consumer.ErrLeaseLost), "the cancelled delivery cannot ack")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "get"}, "missing ID"},
		{[]string{"task", "get", "not-an-id"}, "is not a task ID"},
		{[]string{"task", "get", "--key", "k"}, "--queue and --key go together"},
		{[]string{"task", "get", id, "--queue", "emails", "--key", "k"}, "not both"},
		{[]string{"task", "cancel", "--queue", "Bad Queue!", "--key", "k"}, "is not a queue name"},
		{[]string{"task", "reschedule", id}, "nothing to change"},
		{[]string{"task", "reschedule", id, "--in", "-5m"}, "is negative"},
		{[]string{"task", "reschedule", id, "--at", "tomorrow"}, "is not an RFC 3339 time"},
		{[]string{"task", "reschedule", id, "--in", "1m", "--at", "2026-11-23T02:00:00Z"}, "none of the others can be"},
		{[]string{"task", "reschedule", id, "--priority", "1000"}, "--priority 1000 is not in"},
	} {
		c.fails(exitUsage, tc.args, tc.want)
	}
}
