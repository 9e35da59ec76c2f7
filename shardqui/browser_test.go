package shardqui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

// The browser tests drive a headless Chromium, found (and installed when missing) by
// scripts/chromium. Without one they fail: they never skip.

// screenshotsEnv, set to 1, makes the browser tests write the README's screenshots to
// docs/ (off by default, so test runs leave the clone clean).
const screenshotsEnv = "SHARDQ_UI_SCREENSHOTS"

var browser struct {
	once   sync.Once
	ctx    context.Context // the browser's: each test opens a tab in it
	cancel context.CancelFunc
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel() // ends the browser process
	}
	os.Exit(code)
}

// chromiumPath asks scripts/chromium, which honours SHARDQ_CHROMIUM.
func chromiumPath() (string, error) {
	out, err := exec.Command(filepath.Join("..", "scripts", "chromium")).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return "", fmt.Errorf("scripts/chromium: %w: %s", err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// tab opens a tab of the shared browser for t, closed when t ends; its actions time out
// after a minute.
func tab(t *testing.T) context.Context {
	t.Helper()
	browser.once.Do(func() {
		path, err := chromiumPath()
		if err != nil {
			browser.err = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
			chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
		alloc, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, stop := chromedp.NewContext(alloc)
		browser.ctx, browser.cancel = ctx, func() { stop(); stopAlloc() }
		browser.err = chromedp.Do(ctx) // starts the browser
	})
	require.NoError(t, browser.err, "the browser tests need Chromium: run scripts/chromium, or set SHARDQ_CHROMIUM")
	ctx, closeTab := chromedp.NewContext(browser.ctx)
	t.Cleanup(closeTab)
	require.NoError(t, chromedp.Do(ctx), "opening a tab") // without a timeout, which would close the tab
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// do runs browser steps, failing t on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// get runs one browser action that returns a value, failing t on error.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err)
	return v
}

// text is the visible text of the first element sel matches, once there is one.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// submit clicks the button sel matches and waits for the page its form leads to.
func submit(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	require.NoError(t, err)
	require.EqualValues(t, 200, resp.Status, "the page after %s", sel)
}

// postStatus POSTs body to path from the page, with its cookies, and returns the status.
func postStatus(t *testing.T, ctx context.Context, path, body string) int {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[int](fmt.Sprintf(`fetch(%q, {method: "POST", credentials: "same-origin",
		headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q}).then(r => r.status)`, path, body),
		chromedp.EvalAwaitPromise))
}

// screenshot writes the element sel matches to docs/name when screenshotsEnv asks.
func screenshot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	if os.Getenv(screenshotsEnv) != "1" {
		return
	}
	png := get(t, ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	require.NoError(t, os.WriteFile(filepath.Join("..", "docs", name), png, 0o644))
}

// spread schedules n tasks over the lap, denser towards its start, and a few due now,
// so that the heatmap has something to show. None comes due within the next minute:
// the tests count the scheduled ones.
func (f *fixture) spread(n int) {
	f.t.Helper()
	now := time.Now()
	lap := f.q.Layout().Lap()
	tasks := make([]producer.Task, 0, n)
	for i := range n {
		x := float64(i) / float64(n)
		due := now.Add(time.Minute + time.Duration(x*x*x*float64(lap-2*time.Minute)))
		if i%50 == 0 {
			due = time.Time{}
		}
		tasks = append(tasks, producer.Task{Queue: f.q.Name, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), DueAt: due, Priority: i % 10})
	}
	_, err := f.p.ScheduleTasks(context.Background(), tasks)
	require.NoError(f.t, err)
}

func TestBrowserPagesAndLiveRefresh(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := tab(t)
	f.deadLetter("doomed")
	f.spread(3000)
	keyed := f.schedule(producer.Task{Payload: []byte("hello"), DueAt: time.Now().Add(5 * time.Minute), Key: "welcome:alice"})
	sc, err := series.New(cassandratest.Driver(f.s), series.Config{})
	require.NoError(t, err)
	_, err = sc.Create(context.Background(), series.Series{Queue: f.q.Name, Name: "nightly", Cron: "30 2 * * *", Payload: []byte("r")})
	require.NoError(t, err)
	_, err = shardq.CreateQueue(context.Background(), cassandratest.Driver(f.s), shardqtype.QueueConfig{Name: "reports"})
	require.NoError(t, err)

	do(t, ctx, chromedp.Navigate(f.base+"/"))
	require.Equal(t, "Queues", text(t, ctx, "h1"))
	queues := text(t, ctx, "#queues tbody")
	require.Contains(t, queues, "emails")
	require.Contains(t, queues, "reports")
	screenshot(t, ctx, "main", "ui-queues.png")

	// The queue's page shows what its refresh loop counted, then a task scheduled while it
	// is open, without a reload.
	do(t, ctx, chromedp.Navigate(f.base+"/queues/emails"), chromedp.WaitVisible(chromedp.CSS("#heatmap td.now")))
	before := text(t, ctx, "#total-scheduled")
	require.NotEqual(t, "0", before)
	due := time.Now().Add(7 * time.Minute)
	l := f.q.Layout()
	col := l.TimeShard(l.Bucket(due))
	cell := fmt.Sprintf(`Array.from(document.querySelectorAll('#heatmap td[id$="-%d"]')).reduce((n, td) => n + Number(td.dataset.pending), 0)`, col)
	inCol := get(t, ctx, chromedp.Evaluate[int](cell))
	f.schedule(producer.Task{DueAt: due})
	do(t, ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById("total-scheduled").textContent === String(%s + 1)`, before),
		chromedp.WithPollingTimeout(20*time.Second)))
	require.Equal(t, inCol+1, get(t, ctx, chromedp.Evaluate[int](cell)), "the new task shows in its bucket's column")
	do(t, ctx, chromedp.Poll[chromedp.Void](`document.getElementById("line-due").getAttribute("points").split(" ").length >= 2`,
		chromedp.WithPollingTimeout(20*time.Second)))
	screenshot(t, ctx, "#live", "ui-heatmap.png")

	do(t, ctx, chromedp.Navigate(f.base+"/task?queue=emails&key=welcome:alice"))
	require.Equal(t, "scheduled", text(t, ctx, "#task-state"))
	do(t, ctx, chromedp.Navigate(f.base+"/task?id="+keyed.String()))
	require.Equal(t, "hello", text(t, ctx, "#payload"))
	do(t, ctx, chromedp.Navigate(f.base+"/queues/emails/series"))
	require.Contains(t, text(t, ctx, "#series tbody"), "nightly")
	do(t, ctx, chromedp.Navigate(f.base+"/queues/emails/dead"))
	require.Contains(t, text(t, ctx, "#dead tbody"), "smtp: 550 mailbox unavailable")
}

func TestBrowserCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := tab(t)
	id := f.schedule(producer.Task{DueAt: time.Now().Add(time.Hour)})
	do(t, ctx, chromedp.Navigate(f.base+"/task?id="+id.String()))
	submit(t, ctx, "#cancel")
	require.Contains(t, text(t, ctx, "#message"), "Task cancelled")
	_, err := f.in.Task(context.Background(), id)
	require.ErrorIs(t, err, shardqtype.ErrTaskNotFound, "the task is gone")
}

func TestBrowserReplayDeadLetter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := tab(t)
	id := f.deadLetter("doomed")
	do(t, ctx, chromedp.Navigate(f.base+"/queues/emails/dead"))
	submit(t, ctx, "button.replay")
	require.Contains(t, text(t, ctx, "#question"), "Replay dead letter")
	n, err := f.in.CountDeadLetters(context.Background(), "emails")
	require.NoError(t, err)
	require.Equal(t, 1, n, "nothing happens before the confirmation")
	submit(t, ctx, "#confirm")
	require.Contains(t, text(t, ctx, "#message"), "Dead letter replayed")
	require.Equal(t, "scheduled", text(t, ctx, "#task-state"))
	require.Equal(t, id.String(), text(t, ctx, "#task-id"), "the replayed task keeps its ID")
	n, err = f.in.CountDeadLetters(context.Background(), "emails")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestBrowserCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := tab(t)
	id := f.schedule(producer.Task{DueAt: time.Now().Add(time.Hour)})
	do(t, ctx, chromedp.Navigate(f.base+"/task?id="+id.String()), chromedp.WaitVisible(chromedp.CSS("#cancel")))
	require.Equal(t, 403, postStatus(t, ctx, "/task/cancel", "id="+id.String()), "no token")
	require.Equal(t, 403, postStatus(t, ctx, "/task/cancel", "id="+id.String()+"&csrf=forged"), "a wrong token")
	info, err := f.in.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, info.State)
}

func TestBrowserPayloadIsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := tab(t)
	const evil = `<script>window.pwned=1</script>`
	id := f.schedule(producer.Task{Payload: []byte(evil)})
	do(t, ctx, chromedp.Navigate(f.base+"/task?id="+id.String()))
	require.Equal(t, evil, text(t, ctx, "#payload"))
	require.Equal(t, "undefined", get(t, ctx, chromedp.Evaluate[string](`typeof window.pwned`)))
	do(t, ctx, chromedp.Navigate(f.base+"/queues/emails"))
	require.Equal(t, evil, text(t, ctx, "#peek td.payload"), "the task due now is peeked, its payload as text")
	require.Equal(t, "undefined", get(t, ctx, chromedp.Evaluate[string](`typeof window.pwned`)))
}

func TestBrowserReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{ReadOnly: true})
	ctx := tab(t)
	id := f.schedule(producer.Task{DueAt: time.Now().Add(time.Hour)})
	f.deadLetter("dead")
	for _, u := range []string{"/task?id=" + id.String(), "/queues/emails/dead", "/queues/emails/series", "/queues/emails"} {
		do(t, ctx, chromedp.Navigate(f.base+u), chromedp.WaitVisible(chromedp.CSS("h1")))
		require.Zero(t, get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[method="post"]').length`)), "%s shows no action", u)
	}
	require.Equal(t, 403, postStatus(t, ctx, "/task/cancel", "id="+id.String()))
	info, err := f.in.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, shardqtype.TaskScheduled, info.State)
}
