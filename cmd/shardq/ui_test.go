package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUI serves the dashboard over TLS behind basic auth, as an operator would start it,
// and stops it by interruption.
func TestUI(t *testing.T) {
	t.Parallel()
	c, ks := schemaKeyspace(t)
	c.ok("queue", "create", "emails")
	ca, cert, key := writeCert(t, t.TempDir())
	c.env[envUIBasicAuth] = "ops:s3cret"

	out, stdout := io.Pipe()
	var stderr strings.Builder
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	exited := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"ui", "--listen", "127.0.0.1:0", "--listen-cert", cert, "--listen-key", key}, c.app(stdout, &stderr))
		stdout.Close()
		exited <- code
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr.String())
	m := regexp.MustCompile(`^serving the dashboard of keyspace ` + ks + ` on (https://127\.0\.0\.1:\d+/)\n$`).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	go func() { _, _ = io.Copy(io.Discard, out) }()

	pem, err := os.ReadFile(ca)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	get := func(user, pass string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, m[1], nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	for _, creds := range [][2]string{{"", ""}, {"ops", "guess"}, {"root", "s3cret"}} {
		resp, _ := get(creds[0], creds[1])
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, creds)
		require.Equal(t, `Basic realm="shardq", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
	}
	resp, body := get("ops", "s3cret")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `href="/queues/emails"`)

	stop()
	select {
	case code := <-exited:
		require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("shardq ui did not stop when interrupted")
	}
	require.Empty(t, stderr.String(), "on a loopback address, no warning")
}

func TestUIUsage(t *testing.T) {
	t.Parallel()
	c := &cli{t: t, env: map[string]string{envKeyspace: "ks"}}
	c.fails(exitUsage, []string{"ui", "--basic-auth", "nopassword"}, "--basic-auth", "user:password")
	c.fails(exitUsage, []string{"ui", "--listen-cert", "cert.pem"}, "--listen-cert and --listen-key go together")
	c.fails(exitUsage, []string{"ui", "--listen", "8080"}, "--listen \"8080\": give host:port")
	c.env[envUIBasicAuth] = ":"
	c.fails(exitUsage, []string{"ui"}, envUIBasicAuth)
}
