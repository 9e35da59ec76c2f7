package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/series"
)

// The series commands list, pause, resume and delete series that a program created.
func TestSeriesCommands(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.ok("queue", "create", "reports")
	require.Equal(t, "no series in queue reports\n", c.ok("series", "list", "reports"))

	client, err := series.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), series.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = client.Create(ctx, series.Series{Queue: "reports", Name: "nightly", Cron: "30 2 * * *", TimeZone: "Europe/Paris"})
	require.NoError(t, err)
	_, err = client.Create(ctx, series.Series{Queue: "reports", Name: "pulse", Every: time.Minute})
	require.NoError(t, err)

	lines := strings.Split(strings.TrimSpace(c.ok("series", "list", "reports")), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^NAME\s+SCHEDULE\s+STATE\s+RUNS\s+NEXT$`, lines[0])
	require.Regexp(t, `^nightly\s+cron "30 2 \* \* \*" Europe/Paris\s+active\s+1\s+\d{4}-\d\d-\d\dT\d\d:30:00Z$`, lines[1])
	require.Regexp(t, `^pulse\s+every 1m0s\s+active\s+1\s+\d{4}-`, lines[2])

	require.Equal(t, "series pulse of queue reports paused\n", c.ok("series", "pause", "reports", "pulse"))
	one := jsonLines(t, c.ok("--json", "series", "list", "reports", "pulse"))
	require.Len(t, one, 1)
	require.Equal(t, "paused", one[0]["state"])
	require.Equal(t, 60000.0, one[0]["every_ms"])
	require.NotContains(t, one[0], "next_at", "a paused series has nothing outstanding")

	require.Equal(t, []map[string]any{{"queue": "reports", "name": "pulse", "resumed": true}},
		jsonLines(t, c.ok("--json", "series", "resume", "reports", "pulse")))
	require.Contains(t, c.ok("series", "list", "reports", "pulse"), "active")

	require.Equal(t, "series nightly of queue reports deleted\n", c.ok("series", "delete", "reports", "nightly"))
	all := jsonLines(t, c.ok("--json", "series", "list", "reports"))
	require.Len(t, all, 1)
	require.Equal(t, "pulse", all[0]["name"])

	c.fails(exitFailed, []string{"series", "pause", "reports", "nightly"}, "series not found", "shardq series list reports")
	c.fails(exitUsage, []string{"series", "pause", "reports"}, "missing NAME")
	c.fails(exitUsage, []string{"series", "list"}, "missing QUEUE")
	c.fails(exitUsage, []string{"series", "resume", "Bad Queue!", "x"}, "is not a queue name")
	c.fails(exitFailed, []string{"series", "list", "nosuch"}, "queue not found", "shardq queue list")
}
