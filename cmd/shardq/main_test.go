package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
)

// result is what one run of the command printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the command in-process, as the binary would, with hosts and keyspace
// coming from the environment as an operator's shell would give them.
type cli struct {
	t        *testing.T
	env      map[string]string
	stdin    string
	terminal bool // whether stdin, stdout and stderr count as terminals
}

func newCLI(t *testing.T, keyspace string) *cli {
	return &cli{t: t, env: map[string]string{
		envHosts:    strings.Join(cassandratest.Hosts(t), ","),
		envKeyspace: keyspace,
	}}
}

func (c *cli) app(stdout, stderr io.Writer) *app {
	return &app{
		stdin: strings.NewReader(c.stdin), stdout: stdout, stderr: stderr,
		getenv:   func(k string) string { return c.env[k] },
		terminal: func(any) bool { return c.terminal },
	}
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, c.app(&stdout, &stderr))
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: code}
	require.NotContains(c.t, r.stderr, "goroutine ", "no stack is ever printed")
	return r
}

// ok runs args and requires success.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, exitOK, r.code, "%v: stderr %s", args, r.stderr)
	require.Empty(c.t, r.stderr)
	return r.stdout
}

// fails runs args and requires exit code, and a message on stderr holding every want.
func (c *cli) fails(code int, args []string, want ...string) result {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, code, r.code, "%v: stdout %q stderr %q", args, r.stdout, r.stderr)
	require.True(c.t, strings.HasPrefix(r.stderr, "shardq: "), "%q", r.stderr)
	for _, w := range want {
		require.Contains(c.t, r.stderr, w, "%v", args)
	}
	return r
}

// jsonLines decodes one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		objs = append(objs, m)
	}
	return objs
}

// schemaKeyspace is an empty keyspace with shardq's schema, applied (again) by the command.
func schemaKeyspace(t *testing.T) (*cli, string) {
	return applySchema(t, cassandratest.SchemaKeyspace(t))
}

// applySchema applies shardq's schema to ks with the command.
func applySchema(t *testing.T, ks string) (*cli, string) {
	c := newCLI(t, ks)
	// Tables are created one after another, each agreed by every node: slow on a busy node.
	require.Equal(t, fmt.Sprintf("schema applied to keyspace %s (%d statements)\n", ks, len(shardq.Schema())), c.ok("--request-timeout", "1m", "schema", "apply"))
	return c, ks
}

// Bad usage exits 2 with a message naming what was wrong, before anything is sent.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"bogus"}, []string{`unknown command "bogus"`, "Run 'shardq --help'"}},
		{[]string{"stats"}, []string{"missing QUEUE", "Run 'shardq stats --help' for usage."}},
		{[]string{"stats", "q", "extra"}, []string{`unexpected argument "extra"`}},
		{[]string{"stats", "q", "--bogus"}, []string{"unknown flag: --bogus", "Run 'shardq stats --help'"}},
		{[]string{"stats", "Bad Name"}, []string{`"Bad Name" is not a queue name`}},
		{[]string{"stats", "q", "--watch", "--interval", "10ms"}, []string{"--interval 10ms is too short"}},
		{[]string{"peek", "q", "-n", "0"}, []string{"-n 0 is not in [1, 1000]"}},
		{[]string{"peek", "q", "-n", "many"}, []string{`invalid argument "many"`}},
		{[]string{"queue"}, nil}, // help, not an error: see TestHelp
		{[]string{"queue", "create"}, []string{"missing NAME"}},
		{[]string{"queue", "create", "q", "--shards", "0"}, []string{"QueueConfig.ShardCount", "0 is not in [1, 10000]"}},
		{[]string{"queue", "create", "q", "--bucket", "10"}, []string{`invalid argument "10" for "--bucket"`, "missing unit"}},
		{[]string{"queue", "create", "q", "--timeout", "1h"}, []string{"QueueConfig.DefaultTimeout", "lap"}},
		{[]string{"queue", "show"}, []string{"missing NAME"}},
		{[]string{"schedule", "q"}, []string{`required flag(s) "payload" not set`}},
		{[]string{"schedule", "q", "--payload", "x", "--in", "5x"}, []string{`invalid argument "5x" for "--in"`}},
		{[]string{"schedule", "q", "--payload", "x", "--in", "-5m"}, []string{"--in -5m0s is negative"}},
		{[]string{"schedule", "q", "--payload", "x", "--in", "5m", "--at", "2026-11-23T02:00:00Z"}, []string{"[at in] were all set"}},
		{[]string{"schedule", "q", "--payload", "x", "--at", "tomorrow"}, []string{`--at "tomorrow" is not an RFC 3339 time`}},
		{[]string{"schedule", "q", "--payload", "x", "--priority", "12"}, []string{"--priority 12 is not in [0, 9]"}},
		{[]string{"schedule", "q", "--payload", "x", "--header", "novalue"}, []string{`--header "novalue" is not NAME=VALUE`}},
		{[]string{"schedule", "q", "--payload", "@" + filepath.Join(dir, "missing.json")}, []string{"--payload @", "no such file"}},
		{[]string{"--keyspace", "bad-name", "stats", "q"}, []string{`--keyspace "bad-name" is not a keyspace name`}},
		{[]string{"--hosts", "", "stats", "q"}, []string{"--hosts is empty"}},
		{[]string{"--password", "secret", "stats", "q"}, []string{"without a user name", "--username"}},
		{[]string{"--tls-cert", "c.pem", "stats", "q"}, []string{"--tls-cert and --tls-key go together"}},
		{[]string{"--tls-ca", filepath.Join(dir, "missing.pem"), "stats", "q"}, []string{"--tls-ca", "no such file"}},
		{[]string{"--request-timeout", "0s", "stats", "q"}, []string{"--request-timeout 0s"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			// Unreachable hosts: any of these that tried to connect would fail with 1.
			c := &cli{t: t, env: map[string]string{envHosts: "127.0.0.1:1", envKeyspace: "ks"}}
			if tc.want == nil {
				require.Equal(t, exitOK, c.run(tc.args...).code)
				return
			}
			c.fails(exitUsage, tc.args, tc.want...)
		})
	}
	t.Run("no keyspace", func(t *testing.T) {
		t.Parallel()
		c := &cli{t: t, env: map[string]string{}}
		c.fails(exitUsage, []string{"queue", "list"}, "no keyspace given", "--keyspace", envKeyspace)
	})
}

func TestHelp(t *testing.T) {
	t.Parallel()
	c := &cli{t: t, env: map[string]string{}}
	out := c.ok("--help")
	for _, cmd := range []string{"schema", "queue", "stats", "peek", "schedule", "--hosts", "--keyspace", "--tls-ca", "--json", "Exit codes"} {
		require.Contains(t, out, cmd)
	}
	require.Contains(t, c.ok("queue"), "create")
	require.Contains(t, c.ok("stats", "--help"), "DUE AGAIN")
}

// A well-formed command that fails on the cluster exits 1 and says what to do.
func TestOperationFailures(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.fails(exitFailed, []string{"stats", "nosuch"}, `queue not found: "nosuch" in keyspace "`+ks+`"`, "shardq queue create")
	c.fails(exitFailed, []string{"peek", "nosuch"}, "queue not found")
	c.fails(exitFailed, []string{"queue", "show", "nosuch"}, "queue not found")
	c.fails(exitFailed, []string{"schedule", "nosuch", "--payload", "x"}, "queue not found")

	c.ok("queue", "create", "q", "--shards", "2", "--buckets", "60")
	c.fails(exitFailed, []string{"queue", "create", "q", "--shards", "3", "--buckets", "60"},
		`queue "q" exists with ShardCount = 2, not 3`, "settings cannot change")
	// Values only the stored settings reject are usage errors: nothing was written.
	c.fails(exitUsage, []string{"schedule", "q", "--payload", "x", "--timeout", "1h"}, "Timeout", "Nothing was written.")
	c.stdin = strings.Repeat("x", 65<<10)
	c.fails(exitUsage, []string{"schedule", "q", "--payload", "-"}, "over the 65536 allowed", "Nothing was written.")

	c.fails(exitFailed, []string{"--keyspace", "nosuch_ks", "queue", "list"}, `keyspace "nosuch_ks" does not exist`, "CREATE KEYSPACE")
	c.fails(exitFailed, []string{"--keyspace", "system", "queue", "list"}, "shardq schema apply")
	c.fails(exitFailed, []string{"--hosts", "127.0.0.1:1", "queue", "list"}, "cannot connect to Cassandra at 127.0.0.1:1", "check --hosts")
	c.fails(exitFailed, []string{"--tls", "queue", "list"}, "check the --tls flags")
	// Whether connecting or the first read times out, the message says which knob to turn.
	c.fails(exitFailed, []string{"--request-timeout", "1us", "stats", "q"}, "raise", "--request-timeout 1µs")
}

func TestSchemaAndQueues(t *testing.T) {
	t.Parallel()
	c, ks := applySchema(t, cassandratest.Keyspace(t))
	require.Equal(t, fmt.Sprintf("schema applied to keyspace %s (%d statements)\n", ks, len(shardq.Schema())), c.ok("schema", "apply"), "applying again changes nothing")
	require.Equal(t, []map[string]any{{"keyspace": ks, "statements": float64(len(shardq.Schema()))}}, jsonLines(t, c.ok("--json", "schema", "apply")))

	require.Equal(t, "no queues in keyspace "+ks+"; create one with 'shardq queue create NAME'\n", c.ok("queue", "list"))
	require.Empty(t, c.ok("queue", "list", "--json"))

	out := c.ok("queue", "create", "emails", "--shards", "4", "--buckets", "150", "--bucket", "5s", "--timeout", "2m")
	require.Equal(t, `queue emails created
name             emails
shards           4
buckets          150 x 5s (one lap: 12m30s)
default timeout  2m0s (at most 12m25s)
lock ttl         3s
state            running
`, out)
	require.True(t, strings.HasPrefix(c.ok("queue", "create", "emails", "--shards", "4", "--buckets", "150", "--bucket", "5s", "--timeout", "2m"),
		"queue emails exists already, with these settings\n"))
	created := jsonLines(t, c.ok("queue", "create", "reports", "--json"))
	require.Len(t, created, 1)
	require.Equal(t, true, created[0]["created"])
	require.Equal(t, map[string]any{"name": "reports", "shard_count": 8.0, "bucket_count": 120.0, "bucket_duration_ms": 10000.0,
		"lap_ms": 1.2e6, "default_timeout_ms": 30000.0, "max_timeout_ms": 1.19e6, "lock_ttl_ms": 3000.0, "paused": false}, created[0]["queue"])
	require.Equal(t, false, jsonLines(t, c.ok("queue", "create", "reports", "--json"))[0]["created"])

	lines := strings.Split(strings.TrimSpace(c.ok("queue", "list")), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^NAME\s+SHARDS\s+BUCKETS\s+BUCKET\s+LAP\s+TIMEOUT\s+LOCK TTL\s+STATE\s+CREATED$`, lines[0])
	require.Regexp(t, `^emails\s+4\s+150\s+5s\s+12m30s\s+2m0s\s+3s\s+running\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[1])
	require.Regexp(t, `^reports\s+8\s+120\s+10s\s+20m0s\s+30s\s+3s\s+running\s+`, lines[2])
	list := jsonLines(t, c.ok("--json", "queue", "list"))
	require.Len(t, list, 2)
	require.Equal(t, "emails", list[0]["name"])
	require.Equal(t, 5000.0, list[0]["bucket_duration_ms"])
	require.NotEmpty(t, list[0]["created_at"])

	show := c.ok("queue", "show", "emails")
	require.Contains(t, show, "buckets          150 x 5s (one lap: 12m30s)\n")
	require.Regexp(t, `created\s+\d{4}-`, show)
	shown := jsonLines(t, c.ok("queue", "show", "emails", "--json"))
	require.Len(t, shown, 1)
	require.Equal(t, list[0], shown[0])

	require.Equal(t, "queue emails paused: workers take none of its tasks from at most 5s from now; tasks in flight finish, and producers keep scheduling\n",
		c.ok("queue", "pause", "emails"))
	require.Contains(t, c.ok("queue", "show", "emails"), "state            paused\n")
	require.Regexp(t, `(?m)^emails\s.*\spaused\s`, c.ok("queue", "list"))
	require.Equal(t, "queue emails resumed: workers take its tasks again within 10s\n", c.ok("queue", "resume", "emails"))
	require.Equal(t, false, jsonLines(t, c.ok("queue", "show", "emails", "--json"))[0]["paused"])
	c.fails(exitFailed, []string{"queue", "pause", "nosuch"}, "queue not found")

	require.Regexp(t, `^queue emails: layout 1 takes effect at \d{4}-\S+Z\n$`, c.ok("queue", "resize", "emails", "--shards", "16"))
	require.Regexp(t, `(?m)^layout 1\s+16 shards, 150 x 5s \(takes effect at \d{4}-`, c.ok("queue", "show", "emails"))
	c.fails(exitFailed, []string{"queue", "resize", "emails", "--shards", "2"}, "cannot change yet")
	require.Equal(t, "queue reports already has this layout (layout 0)\n", c.ok("queue", "resize", "reports", "--shards", "8"))
	c.fails(exitUsage, []string{"queue", "resize", "emails", "--bucket", "7ms"}, "LayoutConfig.BucketDuration")

	// Flags win over the environment.
	flags := &cli{t: t, env: map[string]string{envHosts: "127.0.0.1:1", envKeyspace: "nosuch_ks"}}
	require.Contains(t, flags.ok("--hosts", c.env[envHosts], "--keyspace", ks, "queue", "list"), "emails")
}

func TestScheduleStatsPeek(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.ok("queue", "create", "q", "--shards", "2", "--buckets", "60")

	out := c.ok("schedule", "q", "--payload", "hello", "--priority", "9")
	require.Regexp(t, `^scheduled [0-9a-f-]{36} on queue q, due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, priority 9\n$`, out)
	file := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"n":1}`), 0o600))
	fromFile := jsonLines(t, c.ok("--json", "schedule", "q", "--payload", "@"+file, "--priority", "3"))
	require.Len(t, fromFile, 1)
	require.Equal(t, "q", fromFile[0]["queue"])
	require.Equal(t, 3.0, fromFile[0]["priority"])
	c.stdin = "later"
	soon := time.Now().Add(5 * time.Minute)
	later := jsonLines(t, c.ok("--json", "schedule", "q", "--payload", "-", "--in", "5m"))[0]
	dueAt, err := time.Parse(time.RFC3339Nano, later["due_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, soon, dueAt, 5*time.Second)
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	require.Contains(t, c.ok("schedule", "q", "--payload", "next hour", "--at", at), "due "+at)

	stats := jsonLines(t, c.ok("--json", "stats", "q"))
	require.Len(t, stats, 1)
	s := stats[0]
	require.Equal(t, map[string]any{"due": 2.0, "due_again": 0.0, "scheduled": 1.0, "in_flight": 0.0, "retrying": 0.0}, s["total"],
		"the task due in an hour is beyond the 10-minute lap")
	require.Equal(t, 120.0, s["partitions"])
	require.Equal(t, 0.0, s["dead_letters"])
	require.Equal(t, 31.0, s["dead_letter_days"])
	require.Equal(t, 600000.0, s["lap_ms"])
	require.Empty(t, s["failed"])
	require.GreaterOrEqual(t, s["oldest_due_age_ms"], 0.0)
	require.Len(t, s["shards"], 2)

	peek := c.ok("peek", "q")
	lines := strings.Split(strings.TrimSpace(peek), "\n")
	require.Len(t, lines, 3, peek)
	require.Regexp(t, `^PRIORITY\s+WAITING\s+ATTEMPTS\s+ID\s+PAYLOAD$`, lines[0])
	require.Regexp(t, `^9\s+\S+\s+0\s+[0-9a-f-]{36}\s+"hello"$`, lines[1])
	require.Regexp(t, `^3\s+\S+\s+0\s+`+fromFile[0]["id"].(string)+`\s+"\{\\"n\\":1\}"$`, lines[2])
	peeked := jsonLines(t, c.ok("--json", "peek", "q", "-n", "1"))
	require.Len(t, peeked, 1)
	require.Equal(t, "aGVsbG8=", peeked[0]["payload"], "base64 of hello")
	require.Equal(t, 9.0, peeked[0]["priority"])
	require.Equal(t, 0.0, peeked[0]["attempt"])

	// A consumer leases one of them (shards are visited in a rotating order, so either):
	// one due, one in flight.
	s2 := cassandratest.SessionFor(t, ks)
	cons, err := consumer.New(cassandratest.Driver(s2), consumer.Config{Queue: "q"})
	require.NoError(t, err)
	got, err := cons.AcquireTasks(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, got, 1)

	human := c.ok("stats", "q")
	require.Regexp(t, `^queue q at \S+Z \(lap 10m0s: 60 buckets x 10s, 2 shards\)\n`, human)
	require.Regexp(t, `(?m)^\s*SHARD\s+DUE\s+DUE AGAIN\s+SCHEDULED\s+IN FLIGHT\s+RETRYING\s*$`, human)
	require.Regexp(t, `(?m)^\s*total\s+1\s+0\s+1\s+1\s+0\s*$`, human)
	require.Regexp(t, `(?m)^oldest due task: visible for \S+ \(since \S+Z\)$`, human)
	require.Contains(t, human, "dead letters (last 31 days): 0\n")
	require.Regexp(t, `(?m)^read 120 partitions, 3 rows in \S+$`, human)
	require.Contains(t, c.ok("stats", "q", "--full"), "BEHIND FLOORS")

	peek = c.ok("peek", "q")
	lines = strings.Split(strings.TrimSpace(peek), "\n")
	require.Len(t, lines, 2, peek)
	require.NotContains(t, lines[1], got[0].ID.String(), "the leased task is not due")
	require.NoError(t, cons.AckTasks(context.Background(), got...))
	c.ok("queue", "create", "empty")
	require.Equal(t, "no task due in queue empty\n", c.ok("peek", "empty"))
	require.Empty(t, c.ok("--json", "peek", "empty"))
	require.Contains(t, c.ok("stats", "empty"), "oldest due task: none due\n")

	t.Run("watch", func(t *testing.T) { watch(t, c) })
}

// lines is a writer that hands each complete line to a channel.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			return len(p), nil
		}
		l.ch <- line
	}
}

// watch checks that --watch prints a pass per interval until interrupted, which is a
// success, and that a terminal gets a progress bar on stderr.
func watch(t *testing.T, base *cli) {
	c := *base
	c.t, c.terminal = t, true
	out := &lines{ch: make(chan string, 100)}
	var stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--json", "stats", "q", "--watch", "--interval", "500ms"}, c.app(out, &stderr))
	}()
	var passes []time.Time
	for len(passes) < 2 {
		select {
		case line := <-out.ch:
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m))
			at, err := time.Parse(time.RFC3339Nano, m["at"].(string))
			require.NoError(t, err)
			passes = append(passes, at)
		case <-time.After(30 * time.Second):
			t.Fatal("no pass of --watch within 30 s")
		}
	}
	cancel()
	select {
	case got := <-code:
		require.Equal(t, exitOK, got, "interrupting --watch is its normal end")
	case <-time.After(30 * time.Second):
		t.Fatal("--watch did not end within 30 s of its interruption")
	}
	require.GreaterOrEqual(t, passes[1].Sub(passes[0]), 500*time.Millisecond)
	require.Contains(t, stderr.String(), "counting", "the progress bar is drawn on a terminal")
}

func TestTLSFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCert(t, dir)
	a := &app{hosts: []string{"127.0.0.1"}, keyspace: "ks", tlsCA: caFile, tlsCert: certFile, tlsKey: keyFile, tlsServerName: "db.example"}
	c, err := a.cluster()
	require.NoError(t, err)
	require.NotNil(t, c.SslOpts)
	require.True(t, c.SslOpts.EnableHostVerification)
	require.False(t, c.SslOpts.Config.InsecureSkipVerify)
	require.NotNil(t, c.SslOpts.Config.RootCAs)
	require.Len(t, c.SslOpts.Config.Certificates, 1)
	require.Equal(t, "db.example", c.SslOpts.Config.ServerName)

	a = &app{hosts: []string{"127.0.0.1"}, keyspace: "ks", tlsInsecure: true}
	c, err = a.cluster()
	require.NoError(t, err)
	require.False(t, c.SslOpts.EnableHostVerification)
	require.True(t, c.SslOpts.Config.InsecureSkipVerify)

	a = &app{hosts: []string{"127.0.0.1"}, keyspace: "ks"}
	c, err = a.cluster()
	require.NoError(t, err)
	require.Nil(t, c.SslOpts, "no TLS unless asked for")

	a = &app{hosts: []string{"127.0.0.1"}, keyspace: "ks", tlsCA: keyFile}
	_, err = a.cluster()
	require.ErrorContains(t, err, "holds no PEM certificate")
}
