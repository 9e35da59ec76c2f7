package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

// Environment variables that stand in for the connection flags.
const (
	envHosts    = cqlcluster.HostsEnv
	envKeyspace = "SHARDQ_CASSANDRA_KEYSPACE"
	envUsername = "SHARDQ_CASSANDRA_USERNAME"
	envPassword = "SHARDQ_CASSANDRA_PASSWORD"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// app is one run of the command: where it reads and writes, and its global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal reports whether f (stdin, stdout or stderr) is a terminal: progress bars
	// and screen refreshes are shown, and confirmations asked, only there.
	terminal func(f any) bool

	hosts              []string
	keyspace           string
	username, password string
	tls                bool
	tlsCA, tlsCert     string
	tlsKey             string
	tlsInsecure        bool
	tlsServerName      string
	requestTimeout     time.Duration
	json               bool
}

func stdApp() *app {
	return &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, terminal: isTerminal}
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// usageError is bad usage, found before anything was sent: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// ranError is an error from a command that started running: exit code 1, or 2 when it
// is a validation error (shardqtype.ErrInvalid), which means nothing was written.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// run runs the command line args and returns the exit code. Errors are printed as one
// or two lines on stderr, never with a stack.
func run(ctx context.Context, args []string, a *app) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(a.stderr, "shardq: internal error: %v\nPlease report it with the command line that caused it.\n", r)
			code = exitFailed
		}
	}()
	root := a.root()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	// The library's errors start with "shardq: " too.
	msg := "shardq: " + strings.TrimPrefix(err.Error(), "shardq: ")
	var ue *usageError
	var re *ranError
	switch {
	case errors.As(err, &ue) || !errors.As(err, &re):
		fmt.Fprintf(a.stderr, "%s\nRun '%s --help' for usage.\n", msg, cmd.CommandPath())
		return exitUsage
	case errors.Is(err, shardqtype.ErrInvalid):
		fmt.Fprintf(a.stderr, "%s\nNothing was written.\n", msg)
		return exitUsage
	}
	fmt.Fprintln(a.stderr, msg)
	return exitFailed
}

// root builds the command tree with the global flags.
func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "shardq",
		Short: "Operate shardq queues: schema, queues, stats, peeking, tasks, series, dead letters",
		Long: `shardq operates the queues of a shardq keyspace on Apache Cassandra.

Connection flags apply to every command; each has an environment variable that is used
when the flag is not given: ` + envHosts + `, ` + envKeyspace + `,
` + envUsername + ` and ` + envPassword + ` (prefer the variable to --password,
which other users of the machine can see in the process list).

Exit codes: 0 success; 1 the operation failed (Cassandra unreachable, no such keyspace
or queue, a read or write failed); 2 bad usage (unknown command or flag, a missing or
malformed argument, a value the queue's settings reject), in which case nothing was
written.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.settle(cmd) },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	f := root.PersistentFlags()
	f.StringSliceVar(&a.hosts, "hosts", nil, "Cassandra contact points, host or host:port, comma-separated (env "+envHosts+"; default 127.0.0.1)")
	f.StringVarP(&a.keyspace, "keyspace", "k", "", "keyspace holding shardq's tables (env "+envKeyspace+"); required")
	f.StringVar(&a.username, "username", "", "user name for password authentication (env "+envUsername+")")
	f.StringVar(&a.password, "password", "", "password (env "+envPassword+", preferred)")
	f.BoolVar(&a.tls, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	f.StringVar(&a.tlsCA, "tls-ca", "", "PEM file of the CA certificates to verify the nodes with (default: the system's)")
	f.StringVar(&a.tlsCert, "tls-cert", "", "PEM file of the client certificate, for client authentication (with --tls-key)")
	f.StringVar(&a.tlsKey, "tls-key", "", "PEM file of the client certificate's key")
	f.StringVar(&a.tlsServerName, "tls-server-name", "", "name to verify the nodes' certificates against (default: each host's name)")
	f.BoolVar(&a.tlsInsecure, "tls-insecure-skip-verify", false, "do not verify the nodes' certificates (testing only)")
	f.DurationVar(&a.requestTimeout, "request-timeout", 10*time.Second, "how long one request to Cassandra may take")
	f.BoolVar(&a.json, "json", false, "print one JSON object per line instead of text")
	root.AddGroup(&cobra.Group{ID: "ops", Title: "Commands:"})
	for _, c := range []*cobra.Command{a.schemaCmd(), a.queueCmd(), a.statsCmd(), a.peekCmd(), a.scheduleCmd(), a.taskCmd(), a.seriesCmd(), a.deadCmd(), a.uiCmd()} {
		c.GroupID = "ops"
		root.AddCommand(c)
	}
	return root
}

// settle fills the connection flags not given from the environment and checks them,
// before any command runs.
func (a *app) settle(cmd *cobra.Command) error {
	f := cmd.Flags()
	if !f.Changed("hosts") {
		a.hosts = splitHosts(a.getenv(envHosts))
	}
	if len(a.hosts) == 0 && !f.Changed("hosts") {
		a.hosts = []string{"127.0.0.1"}
	}
	for _, h := range a.hosts {
		if strings.TrimSpace(h) == "" {
			return usagef("--hosts has an empty entry: give host or host:port, comma-separated")
		}
	}
	if len(a.hosts) == 0 {
		return usagef("--hosts is empty: give host or host:port, comma-separated")
	}
	if !f.Changed("keyspace") {
		a.keyspace = a.getenv(envKeyspace)
	}
	if !f.Changed("username") {
		a.username = a.getenv(envUsername)
	}
	if !f.Changed("password") {
		a.password = a.getenv(envPassword)
	}
	if a.password != "" && a.username == "" {
		return usagef("a password was given without a user name: add --username (or %s)", envUsername)
	}
	if (a.tlsCert == "") != (a.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both, or neither")
	}
	if a.requestTimeout <= 0 {
		return usagef("--request-timeout %v: give a positive duration, such as 10s", a.requestTimeout)
	}
	return nil
}

func splitHosts(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// keyspaceName is what Cassandra accepts as an unquoted keyspace name.
var keyspaceName = regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)

// cluster builds the driver's configuration from the connection flags.
func (a *app) cluster() (*gocql.ClusterConfig, error) {
	c, err := a.bareCluster()
	if err != nil {
		return nil, err
	}
	c.Keyspace = a.keyspace
	return c, nil
}

// bareCluster is cluster bound to no keyspace.
func (a *app) bareCluster() (*gocql.ClusterConfig, error) {
	switch {
	case a.keyspace == "":
		return nil, usagef("no keyspace given: add --keyspace NAME (or set %s) naming the keyspace that holds shardq's tables", envKeyspace)
	case !keyspaceName.MatchString(a.keyspace):
		return nil, usagef("--keyspace %q is not a keyspace name: 1 to 48 of A-Z a-z 0-9 _", a.keyspace)
	}
	c := cqlcluster.New(a.hosts...)
	c.Timeout = a.requestTimeout
	// The driver's own log lines would repeat, less clearly, the error this command prints.
	c.Logger = log.New(io.Discard, "", 0)
	if a.username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: a.username, Password: a.password}
	}
	if a.tls || a.tlsCA != "" || a.tlsCert != "" || a.tlsInsecure || a.tlsServerName != "" {
		cfg, err := a.tlsConfig()
		if err != nil {
			return nil, err
		}
		c.SslOpts = &gocql.SslOptions{Config: cfg, EnableHostVerification: !a.tlsInsecure}
	}
	return c, nil
}

// tlsConfig loads the TLS files given; a file that cannot be used is bad usage.
func (a *app) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: a.tlsInsecure, ServerName: a.tlsServerName}
	if a.tlsCA != "" {
		pem, err := os.ReadFile(a.tlsCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca %s holds no PEM certificate", a.tlsCA)
		}
	}
	if a.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(a.tlsCert, a.tlsKey)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// session connects to the keyspace. A failure says what to check.
func (a *app) session(ctx context.Context) (*gocql.Session, error) {
	c, err := a.cluster()
	if err != nil {
		return nil, err
	}
	s, err := c.CreateSession()
	if err == nil {
		return s, nil
	}
	if errors.Is(err, gocql.ErrNoConnectionsStarted) && a.keyspaceMissing(ctx) {
		return nil, fmt.Errorf("keyspace %q does not exist on %s: create it (for instance CREATE KEYSPACE %s WITH replication = "+
			"{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}), or name another with --keyspace",
			a.keyspace, strings.Join(a.hosts, ","), a.keyspace)
	}
	hint := "check --hosts (or " + envHosts + "), that the nodes are up and listen for CQL"
	switch msg := err.Error(); {
	case gocqlv1.TimedOut(err):
		hint = "the nodes did not answer within --request-timeout " + a.requestTimeout.String() + ": they may be overloaded; try again, or raise it"
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:"):
		hint = "check the --tls flags: the nodes may not speak TLS, or their certificate does not verify against --tls-ca"
	case strings.Contains(strings.ToLower(msg), "authentication") || strings.Contains(msg, "credentials") || strings.Contains(msg, "Username"):
		hint = "check --username and --password (or " + envUsername + " and " + envPassword + ")"
	}
	return nil, fmt.Errorf("cannot connect to Cassandra at %s: %w; %s", strings.Join(a.hosts, ","), err, hint)
}

// keyspaceMissing tells, through a session bound to no keyspace, whether the keyspace
// is missing: the driver reports that only as "no connections were made".
func (a *app) keyspaceMissing(ctx context.Context) bool {
	bare, err := a.bareCluster()
	if err != nil {
		return false
	}
	s, err := bare.CreateSession()
	if err != nil {
		return false
	}
	defer s.Close()
	var name string
	err = s.Query(`SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`, a.keyspace).
		WithContext(ctx).Consistency(gocql.One).Scan(&name)
	return errors.Is(err, gocql.ErrNotFound)
}

// explain adds what to do to errors whose cause an operator can fix.
func (a *app) explain(err error) error {
	msg := err.Error()
	switch {
	case errors.Is(err, shardqtype.ErrQueueNotFound):
		return fmt.Errorf("%w in keyspace %q: create it with 'shardq queue create NAME', or list the queues with 'shardq queue list'", err, a.keyspace)
	case strings.Contains(msg, "unconfigured table") || (strings.Contains(msg, "table ") && strings.Contains(msg, "does not exist")):
		return fmt.Errorf("%w: shardq's tables are missing in keyspace %q; create them with 'shardq schema apply'", err, a.keyspace)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("interrupted: %w", err)
	case gocqlv1.TimedOut(err):
		return fmt.Errorf("%w: Cassandra did not answer within --request-timeout %v; it may be overloaded: try again, or raise "+
			"--request-timeout (schema apply and queue create are safe to repeat; a schedule that timed out may have been "+
			"written, and repeating it may schedule the task twice)", err, a.requestTimeout)
	}
	return err
}

// command wraps a command's work: errors it returns count as raised by a running
// command, unless they are usage errors.
func (a *app) command(fn func(ctx context.Context, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd.Context(), cmd, args)
		var ue *usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return &ranError{a.explain(err)}
	}
}

// withInspector runs fn with an inspector of a new session.
func (a *app) withInspector(ctx context.Context, fn func(*inspect.Inspector) error) error {
	return a.withSession(ctx, func(s *shardq.Driver) error {
		in, err := inspect.New(s, inspect.Config{})
		if err != nil {
			return err
		}
		return fn(in)
	})
}

// withSession connects, runs fn on the session's driver, and closes the session.
func (a *app) withSession(ctx context.Context, fn func(*shardq.Driver) error) error {
	s, err := a.session(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(shardqgocql.New(s))
}

// args checks the positional arguments of a command that takes exactly those named.
func args(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		if len(got) < len(names) {
			return usagef("missing %s: '%s' takes %s", strings.Join(names[len(got):], " "), cmd.CommandPath(), strings.Join(names, " "))
		}
		if len(got) > len(names) {
			return usagef("unexpected argument %q: '%s' takes %s", got[len(names)], cmd.CommandPath(), strings.Join(names, " "))
		}
		return nil
	}
}

// queueArg checks a queue name argument.
func queueArg(name string) error {
	if !shard.ValidQueueName(name) {
		return usagef("%q is not a queue name: 1 to 63 of a-z 0-9 _ . -, starting with a letter or digit", name)
	}
	return nil
}

// emit prints v as one JSON line.
func (a *app) emit(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// progress returns a progress callback drawing a bar on stderr when it is a terminal
// (nil otherwise), and a func that erases the bar, to call when the work ends.
func (a *app) progress(what string) (func(done, total int), func()) {
	if !a.terminal(a.stderr) {
		return nil, func() {}
	}
	var mu sync.Mutex
	var bar *progressbar.ProgressBar
	update := func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(a.stderr), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionSetWidth(30))
		}
		_ = bar.Set(done)
	}
	erase := func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil {
			_ = bar.Clear()
		}
	}
	return update, erase
}

// ms is a duration in whole milliseconds, for JSON.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// utc formats t for people: UTC, to the second.
func utc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// age rounds a duration for people.
func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
