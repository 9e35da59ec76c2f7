package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
)

// deadLetters schedules n tasks through the command and dead-letters them with a
// consumer, oldest first.
func deadLetters(t *testing.T, c *cli, ks, queue string, n int) {
	t.Helper()
	for i := range n {
		c.ok("schedule", queue, "--payload", fmt.Sprintf("task %d", i))
	}
	cons, err := consumer.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), consumer.Config{Queue: queue})
	require.NoError(t, err)
	ctx := context.Background()
	dead := 0
	require.Eventually(t, func() bool {
		got, err := cons.AcquireTasks(ctx, n-dead)
		require.NoError(t, err)
		for _, task := range got {
			require.NoError(t, cons.DeadLetter(ctx, task, errors.New("smtp: 550 mailbox\nunavailable")))
			dead++
		}
		return dead == n
	}, 30*time.Second, 50*time.Millisecond)
}

// The dead commands list, replay and purge dead letters; --all asks for confirmation on
// a terminal and needs --yes elsewhere.
func TestDeadCommands(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.ok("queue", "create", "emails")
	require.Equal(t, "no dead letters in queue emails\n", c.ok("dead", "list", "emails"))
	deadLetters(t, c, ks, "emails", 5)

	lines := strings.Split(strings.TrimSpace(c.ok("dead", "list", "emails")), "\n")
	require.Len(t, lines, 6)
	require.Regexp(t, `^DIED\s+ID\s+TASK\s+KIND\s+ATTEMPTS\s+ERROR\s+PAYLOAD$`, lines[0])
	require.Regexp(t, `^\S+Z\s+\S+\s+\S+\s+-\s+1\s+smtp: 550 mailbox unavailable\s+"task \d"$`, lines[1])

	page := strings.Split(strings.TrimSpace(c.ok("dead", "list", "emails", "-n", "2")), "\n")
	require.Len(t, page, 4)
	last := idPattern.FindString(page[2])
	require.Equal(t, "more: shardq dead list emails --before "+last, page[3])
	rest := jsonLines(t, c.ok("--json", "dead", "list", "emails", "--before", last))
	require.Len(t, rest, 3)
	require.Equal(t, "smtp: 550 mailbox\nunavailable", rest[0]["error"])
	require.Equal(t, 1.0, rest[0]["attempt"])
	require.Contains(t, rest[0], "payload")

	letter, task := rest[0]["id"].(string), rest[0]["task_id"].(string)
	require.Equal(t, fmt.Sprintf("replayed dead letter %s: task %s is due now\n", letter, task),
		c.ok("dead", "replay", "emails", "--id", letter))
	require.Regexp(t, `(?m)^state\s+scheduled$`, c.ok("task", "get", task))
	c.fails(exitFailed, []string{"dead", "replay", "emails", "--id", letter}, "dead letter not found", "shardq dead list emails")
	require.Equal(t, []map[string]any{{"queue": "emails", "id": rest[1]["id"], "purged": 1.0}},
		jsonLines(t, c.ok("--json", "dead", "purge", "emails", "--id", rest[1]["id"].(string))))
	require.Len(t, jsonLines(t, c.ok("--json", "dead", "list", "emails")), 3)

	// --all: no terminal and no --yes is bad usage; a terminal asks.
	c.fails(exitUsage, []string{"dead", "replay", "emails", "--all"}, "acts on 3 dead letters", "add --yes")
	tty := *c
	tty.terminal, tty.stdin = true, "n\n"
	r := tty.run("dead", "purge", "emails", "--all")
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "purge 3 dead letters of queue emails? [y/N] ")
	require.Contains(t, r.stderr, "not confirmed: nothing was purged")
	tty.stdin = "y\n"
	r = tty.run("dead", "replay", "emails", "--all")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "replayed 3 dead letters of queue emails\n", r.stdout)
	require.Contains(t, r.stderr, "replaying", "a terminal gets a progress bar")
	require.Equal(t, "no dead letters in queue emails\n", c.ok("dead", "list", "emails"))

	deadLetters(t, c, ks, "emails", 4) // four of the tasks due now, replayed or new, die
	require.Equal(t, []map[string]any{{"queue": "emails", "purged": 4.0}},
		jsonLines(t, c.ok("--json", "dead", "purge", "emails", "--all", "--yes")))
	require.Equal(t, []map[string]any{{"queue": "emails", "replayed": 0.0}},
		jsonLines(t, c.ok("--json", "dead", "replay", "emails", "--all")), "nothing to confirm when nothing is dead")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dead", "replay", "emails"}, "--id ID for one, or --all"},
		{[]string{"dead", "purge", "emails", "--all", "--id", letter}, "exclude each other"},
		{[]string{"dead", "purge", "emails", "--id", letter, "--yes"}, "--yes confirms --all"},
		{[]string{"dead", "replay", "emails", "--id", "x"}, "is not a dead letter ID"},
		{[]string{"dead", "list", "emails", "-n", "0"}, "-n 0 is not in"},
		{[]string{"dead", "list", "emails", "--before", "x"}, "is not a dead letter ID"},
		{[]string{"dead", "list"}, "missing QUEUE"},
	} {
		c.fails(exitUsage, tc.args, tc.want)
	}
	c.fails(exitFailed, []string{"dead", "list", "nosuch"}, "queue not found")
	c.fails(exitFailed, []string{"dead", "purge", "nosuch", "--all", "--yes"}, "queue not found")
}
