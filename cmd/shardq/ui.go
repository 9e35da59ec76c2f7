package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/shardqui"
)

// envUIBasicAuth stands in for --basic-auth, which other users could read in the
// process list.
const envUIBasicAuth = "SHARDQ_UI_BASIC_AUTH"

func (a *app) uiCmd() *cobra.Command {
	var listen, basicAuth, cert, key string
	var readOnly bool
	c := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard: queues, the lap as a heatmap, tasks, series, dead letters",
		Long: `Serve the dashboard of the keyspace's queues over HTTP until interrupted (package
shardqui, which services can mount on their own mux instead).

It listens on 127.0.0.1:8080 unless --listen says otherwise; on another address, give
--basic-auth (or ` + envUIBasicAuth + `, preferred: the process list shows flags)
and serve TLS with --listen-cert and --listen-key (the --tls-* flags are the Cassandra
connection's). --read-only hides every action and refuses them.

Cost: each queue an open page shows is counted once per 5 s, as by 'shardq stats
--watch', however many pages are open; see 'shardq stats --help'.`,
		Example: `  shardq ui --keyspace app
  SHARDQ_UI_BASIC_AUTH=ops:secret shardq ui --listen :8443 --listen-cert cert.pem --listen-key key.pem
  shardq ui --read-only`,
		Args: args(),
		RunE: a.command(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("basic-auth") {
				basicAuth = a.getenv(envUIBasicAuth)
			}
			var user, pass string
			if basicAuth != "" {
				var ok bool
				if user, pass, ok = strings.Cut(basicAuth, ":"); !ok || user == "" || pass == "" {
					return usagef("--basic-auth (or %s) takes user:password, both non-empty", envUIBasicAuth)
				}
			}
			if (cert == "") != (key == "") {
				return usagef("--listen-cert and --listen-key go together: give both, or neither")
			}
			var tlsCfg *tls.Config
			if cert != "" {
				pair, err := tls.LoadX509KeyPair(cert, key)
				if err != nil {
					return usagef("--listen-cert/--listen-key: %v", err)
				}
				tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usagef("--listen %q: give host:port, such as 127.0.0.1:8080", listen)
			}
			return a.withSession(ctx, func(s *shardq.Driver) error {
				return a.serveUI(ctx, s, listen, host, user, pass, tlsCfg, readOnly)
			})
		}),
	}
	f := c.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve on, host:port")
	f.BoolVar(&readOnly, "read-only", false, "hide every action and refuse them")
	f.StringVar(&basicAuth, "basic-auth", "", "require HTTP basic authentication as user:password (env "+envUIBasicAuth+", preferred)")
	f.StringVar(&cert, "listen-cert", "", "PEM file of the dashboard's TLS certificate (with --listen-key): serve HTTPS")
	f.StringVar(&key, "listen-key", "", "PEM file of that certificate's key")
	return c
}

// serveUI serves the dashboard until ctx ends.
func (a *app) serveUI(ctx context.Context, s *shardq.Driver, listen, host, user, pass string, tlsCfg *tls.Config, readOnly bool) error {
	ui, err := shardqui.New(s, shardqui.Config{ReadOnly: readOnly})
	if err != nil {
		return err
	}
	defer ui.Close()
	var h http.Handler = ui
	if user != "" {
		h = basicAuth(h, user, pass)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	mode := ""
	if readOnly {
		mode = ", read-only"
	}
	fmt.Fprintf(a.stdout, "serving the dashboard of keyspace %s on %s://%s/%s\n", a.keyspace, scheme, ln.Addr(), mode)
	if ip := net.ParseIP(host); user == "" && (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		fmt.Fprintf(a.stderr, "shardq: warning: serving on %s without --basic-auth: anyone who reaches it can act on the queues\n", listen)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil // interrupted: the normal end
}

// basicAuth lets through requests that carry user and pass. It compares digests, in
// constant time, so neither the time nor the length of an answer tells how much of a
// guess was right.
func basicAuth(h http.Handler, user, pass string) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPass[:], wantPass[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="shardq", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
