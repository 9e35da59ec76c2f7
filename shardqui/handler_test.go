package shardqui

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

// fixture is a keyspace with queue "emails" and a dashboard serving it.
type fixture struct {
	t    *testing.T
	s    *gocql.Session
	q    shardqtype.QueueConfig
	p    *producer.Producer
	in   *inspect.Inspector
	h    *Handler
	srv  *httptest.Server
	base string // the dashboard's URL, prefix included
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	s := cassandratest.SchemaSession(t)
	ctx := context.Background()
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "emails", ShardCount: 4, BucketCount: 60, BucketDuration: 10 * time.Second})
	require.NoError(t, err)
	p, err := producer.New(cassandratest.Driver(s), producer.Config{})
	require.NoError(t, err)
	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = MinRefreshInterval // pages see a change within a second
	}
	h, err := New(cassandratest.Driver(s), cfg)
	require.NoError(t, err)
	t.Cleanup(h.Close)
	mux := http.NewServeMux()
	mux.Handle(cfg.Prefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &fixture{t: t, s: s, q: q, p: p, in: in, h: h, srv: srv, base: srv.URL + cfg.Prefix}
}

func (f *fixture) schedule(task producer.Task) uuid.UUID {
	f.t.Helper()
	task.Queue = f.q.Name
	id, err := f.p.ScheduleTask(context.Background(), task)
	require.NoError(f.t, err)
	return id
}

// deadLetter schedules a task due now, takes it and dead-letters it.
func (f *fixture) deadLetter(payload string) uuid.UUID {
	f.t.Helper()
	ctx := context.Background()
	id := f.schedule(producer.Task{Payload: []byte(payload)})
	c, err := consumer.New(cassandratest.Driver(f.s), consumer.Config{Queue: f.q.Name})
	require.NoError(f.t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.AcquireTasks(ctx, 10)
		require.NoError(f.t, err)
		for _, task := range got {
			require.Equal(f.t, id, task.ID)
			require.NoError(f.t, c.DeadLetter(ctx, task, errors.New("smtp: 550 mailbox unavailable")))
			return id
		}
		require.True(f.t, time.Now().Before(deadline), "task %s was never delivered", id)
	}
}

// client is a browser without a browser: it keeps cookies and does not follow redirects.
type client struct {
	t *testing.T
	c *http.Client
}

func (f *fixture) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(f.t, err)
	return &client{t: f.t, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) get(u string) (int, string) {
	c.t.Helper()
	resp, err := c.c.Get(u)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, string(b)
}

func (c *client) post(u string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	resp, err := c.c.PostForm(u, form)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token reads the CSRF token of a page's forms.
func token(t *testing.T, html string) string {
	t.Helper()
	m := csrfInput.FindStringSubmatch(html)
	require.NotNil(t, m, "the page has an action form")
	return m[1]
}

func TestPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{Prefix: "/ops/shardq"})
	ctx := context.Background()
	f.deadLetter("doomed")
	due := time.Now().Add(5 * time.Minute) // its bucket is judged by this, not by a later now
	soon := f.schedule(producer.Task{Payload: []byte(`{"to":"alice"}`), DueAt: due, Key: "welcome:alice"})
	now := f.schedule(producer.Task{Payload: []byte(`{"to":"bob"}`)})
	sc, err := series.New(cassandratest.Driver(f.s), series.Config{})
	require.NoError(t, err)
	_, err = sc.Create(ctx, series.Series{Queue: f.q.Name, Name: "nightly", Cron: "30 2 * * *", Payload: []byte("report")})
	require.NoError(t, err)
	c := f.client()

	code, body := c.get(f.base + "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/ops/shardq/queues/emails"`, "links carry the prefix")
	require.Contains(t, body, "4 shards × 60 buckets of 10s (lap 10m0s)")
	require.Regexp(t, `data-field="scheduled">\d+<`, body)

	code, body = c.get(f.base + "/queues/emails")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, regexp.MustCompile(`<tr><th>\d</th><td id="c`).FindAllString(body, -1), 4, "a heatmap row per shard")
	require.Equal(t, 4*60, strings.Count(body, `<td id="c`), "a cell per partition of the lap")
	require.Equal(t, 4, strings.Count(body, " now\""), "the column of now is marked in every row")
	require.Contains(t, body, now.String(), "the task due now is peeked")
	l := f.q.Layout()
	cell := regexp.MustCompile(`id="c(\d)-` + regexp.QuoteMeta(strconv.Itoa(l.TimeShard(l.Bucket(due)))) + `" class="h1[^"]*" data-pending="1"`)
	require.Regexp(t, cell, body, "the task due in 5 minutes is in its bucket's column")

	code, body = c.get(f.base + "/api/queues/emails")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"scheduled":1`)
	require.Contains(t, body, `"dead":1`)

	for _, u := range []string{"/task?id=" + soon.String(), "/task?queue=emails&key=welcome:alice"} {
		code, body = c.get(f.base + u)
		require.Equal(t, http.StatusOK, code, u)
		require.Contains(t, body, soon.String())
		require.Contains(t, body, `<dd id="task-state">scheduled</dd>`)
		require.Contains(t, body, "{&#34;to&#34;:&#34;alice&#34;}", "the payload, escaped")
		require.Contains(t, body, `action="/ops/shardq/task/cancel"`)
	}

	code, body = c.get(f.base + "/queues/emails/series")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "nightly")
	require.Contains(t, body, "30 2 * * * (UTC)")

	code, body = c.get(f.base + "/queues/emails/dead")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "smtp: 550 mailbox unavailable")
	require.Contains(t, body, "doomed")

	for u, want := range map[string]int{
		"/queues/missing":               http.StatusNotFound,
		"/api/queues/missing":           http.StatusNotFound,
		"/task?id=" + uuid.NewString():  http.StatusBadRequest, // a version 4 UUID is no task ID
		"/task?id=nonsense":             http.StatusBadRequest,
		"/task?queue=emails&key=nobody": http.StatusNotFound,
		"/queues/missing/dead":          http.StatusNotFound,
		"/nowhere":                      http.StatusNotFound,
	} {
		code, _ := c.get(f.base + u)
		require.Equal(t, want, code, u)
	}
	code, _ = c.get(f.srv.URL + "/queues/emails")
	require.Equal(t, http.StatusNotFound, code, "nothing is served outside the prefix")
}

func TestActionsNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	id := f.schedule(producer.Task{DueAt: time.Now().Add(time.Hour)})
	c := f.client()
	code, page := c.get(f.base + "/task?id=" + id.String())
	require.Equal(t, http.StatusOK, code)
	tok := token(t, page)

	for name, form := range map[string]url.Values{
		"no token":    {"id": {id.String()}},
		"wrong token": {"id": {id.String()}, "csrf": {tok + "x"}},
	} {
		resp, body := c.post(f.base+"/task/cancel", form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		require.Contains(t, body, "CSRF token")
	}
	// Another browser (no cookie) with this browser's token is refused too.
	resp, _ := f.client().post(f.base+"/task/cancel", url.Values{"id": {id.String()}, "csrf": {tok}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	info, err := f.in.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, info.State, "refused actions did nothing")

	resp, _ = c.post(f.base+"/task/reschedule", url.Values{"id": {id.String()}, "csrf": {tok}, "due": {"2h"}, "priority": {"7"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	info, err = f.in.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, 7, info.Priority)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), info.DueAt, time.Minute)

	resp, _ = c.post(f.base+"/task/cancel", url.Values{"id": {id.String()}, "queue": {"emails"}, "csrf": {tok}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/emails?done=cancelled", resp.Header.Get("Location"))
	_, err = f.in.Task(context.Background(), id)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound)
}

// The queue's page pauses and resumes it, with the CSRF token as every action; both
// pages say when it is paused, and a read-only dashboard offers neither.
func TestPauseAndResumeQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := context.Background()
	c := f.client()
	code, page := c.get(f.base + "/queues/emails")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `action="/queues/emails/pause"`)
	tok := token(t, page)
	resp, body := c.post(f.base+"/queues/emails/pause", url.Values{})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "CSRF token")
	info, err := f.in.Queue(ctx, "emails")
	require.NoError(t, err)
	require.False(t, info.Paused, "a refused pause did nothing")

	resp, _ = c.post(f.base+"/queues/emails/pause", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/emails?done=queue-paused", resp.Header.Get("Location"))
	info, err = f.in.Queue(ctx, "emails")
	require.NoError(t, err)
	require.True(t, info.Paused)
	_, page = c.get(f.base + "/queues/emails?done=queue-paused")
	require.Contains(t, page, "Queue paused: workers take none of its tasks from at most 5s from now.")
	require.Contains(t, page, `action="/queues/emails/resume"`)
	_, page = c.get(f.base + "/")
	require.Contains(t, page, `<span class="paused">paused</span>`)
	ro, err := New(cassandratest.Driver(f.s), Config{ReadOnly: true, RefreshInterval: MinRefreshInterval})
	require.NoError(t, err)
	defer ro.Close()
	rec := httptest.NewRecorder()
	ro.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queues/emails", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `<span class="paused">paused</span>`)
	require.NotContains(t, rec.Body.String(), `method="post"`, "read-only: no pause or resume")

	resp, _ = c.post(f.base+"/queues/emails/resume", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	info, err = f.in.Queue(ctx, "emails")
	require.NoError(t, err)
	require.False(t, info.Paused)
}

func TestDeadLettersAskFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	f.deadLetter("one")
	f.deadLetter("two")
	ctx := context.Background()
	c := f.client()
	_, page := c.get(f.base + "/queues/emails/dead")
	tok := token(t, page)

	resp, body := c.post(f.base+"/queues/emails/dead/purge-all", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Purge every dead letter of queue emails?")
	require.Contains(t, body, `name="confirm" value="yes"`)
	n, err := f.in.CountDeadLetters(ctx, "emails")
	require.NoError(t, err)
	require.Equal(t, 2, n, "asking purged nothing")

	resp, _ = c.post(f.base+"/queues/emails/dead/replay-all", url.Values{"csrf": {tok}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/emails/dead?done=replayed-all&n=2", resp.Header.Get("Location"))
	n, err = f.in.CountDeadLetters(ctx, "emails")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestPayloadsAreShownAsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	script := f.schedule(producer.Task{Payload: []byte(`<script>window.pwned=1</script>`), DueAt: time.Now().Add(time.Hour)})
	binary := f.schedule(producer.Task{Payload: []byte{0xff, 0x00, '<', 'b', '>'}, DueAt: time.Now().Add(time.Hour)})
	c := f.client()
	_, body := c.get(f.base + "/task?id=" + script.String())
	require.Contains(t, body, `&lt;script&gt;window.pwned=1&lt;/script&gt;`)
	require.NotContains(t, body, `<script>window`)
	_, body = c.get(f.base + "/task?id=" + binary.String())
	require.Contains(t, body, "ff 00 3c 62 3e", "binary payloads are shown in hex")
	require.Contains(t, body, "/wA8Yj4=", "and base64")
	require.NotContains(t, body, "<b>")
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{ReadOnly: true})
	id := f.schedule(producer.Task{DueAt: time.Now().Add(time.Hour)})
	f.deadLetter("dead")
	c := f.client()
	for _, u := range []string{"/task?id=" + id.String(), "/queues/emails/dead", "/queues/emails/series"} {
		code, body := c.get(f.base + u)
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, `method="post"`, "%s shows no action", u)
		require.Contains(t, body, "read-only")
	}
	// A token taken from a writable dashboard's page is as good as any: still refused.
	resp, body := c.post(f.base+"/task/cancel", url.Values{"id": {id.String()}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "read-only")
	info, err := f.in.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, info.State)
}

// TestOneRefreshLoopPerQueue: however many pages poll a queue, one loop counts it once
// an interval, and it stops once no page asks.
func TestOneRefreshLoopPerQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	start := time.Now()
	codes := make(chan int)
	for range 8 {
		go func() {
			code := http.StatusOK
			for time.Since(start) < 4*MinRefreshInterval && code == http.StatusOK {
				resp, err := http.Get(f.base + "/api/queues/emails")
				if err != nil {
					code = -1
					break
				}
				resp.Body.Close()
				code = resp.StatusCode
			}
			codes <- code
		}()
	}
	for range 8 {
		require.Equal(t, http.StatusOK, <-codes)
	}
	require.Equal(t, 1, f.h.watch.running())
	snap, err := f.h.watch.get(context.Background(), "emails")
	require.NoError(t, err)
	passes := len(snap.history)
	require.LessOrEqual(t, passes, int(time.Since(start)/MinRefreshInterval)+1, "one pass an interval, whatever the pages")
	require.Eventually(t, func() bool { return f.h.watch.running() == 0 }, 10*time.Second, 50*time.Millisecond,
		"the loop stops when no page asks")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	s := cassandratest.SchemaSession(t)
	for field, cfg := range map[string]Config{
		"Config.Prefix":          {Prefix: "shardq/"},
		"Config.RefreshInterval": {RefreshInterval: time.Millisecond},
		"Config.PeekSize":        {PeekSize: inspect.MaxPeek + 1},
		"Config.DeadLetterPage":  {DeadLetterPage: -1},
	} {
		_, err := New(cassandratest.Driver(s), cfg)
		var ve *shardqtype.ValidationError
		require.ErrorAs(t, err, &ve, field)
		require.Equal(t, field, ve.Field)
	}
	_, err := New(nil, Config{})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)
}
