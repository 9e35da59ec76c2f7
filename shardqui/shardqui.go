// Package shardqui serves a web dashboard of the shardq queues of one keyspace as an
// http.Handler, to mount on a service's own mux behind its own authentication:
//
//	ui, err := shardqui.New(session, shardqui.Config{Prefix: "/shardq"})
//	mux.Handle("/shardq/", requireAdmin(ui))
//
// Pages: every queue's counts; one queue's lap drawn as a shard × bucket heatmap, its
// counts over time and the tasks due next; a task by ID or key, with cancel and
// reschedule; a queue's series, with pause and resume; its dead letters, with replay and
// purge. Everything it reads goes through package inspect, and what it does through the
// producer and series clients, so it never locks anything to read.
//
// Cost: a queue's counts come from one inspect.Stats pass per RefreshInterval, shared by
// every page open on that queue (the same pass, at the same default interval, as
// `shardq stats --watch`); pages poll the handler, not the cluster. A queue's pass stops
// a few intervals after the last page that showed it closed.
//
// Safety: actions are POST forms carrying a token bound to a cookie by an HMAC under a
// secret of this process (a request without it is refused with 403); replaying or
// purging dead letters asks for confirmation first; payloads are shown as escaped text,
// or hex and base64 when they are not text; a Content-Security-Policy allows the
// dashboard's own script only. Config.ReadOnly hides every action and refuses POSTs.
//
// It is a module of its own (github.com/shardq/shardq/shardqui), so that services that
// do not serve it do not require its test dependencies (a headless browser driver).
package shardqui

import (
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

// Defaults for Config.
const (
	// DefaultRefreshInterval is `shardq stats --watch`'s default interval.
	DefaultRefreshInterval = 5 * time.Second
	DefaultPeekSize        = 20
	DefaultDeadLetterPage  = 50
)

// MinRefreshInterval is the shortest Config.RefreshInterval: each pass reads the whole
// lap of a queue (`shardq stats --watch` has the same floor).
const MinRefreshInterval = 500 * time.Millisecond

// Config configures a Handler.
type Config struct {
	// Prefix is the path the handler is mounted under, such as "/shardq" for
	// mux.Handle("/shardq/", h): its links start with it and it strips it from requests.
	// Defaults to "", the root.
	Prefix string
	// ReadOnly hides every action and refuses every POST with 403 Forbidden.
	// Defaults to false.
	ReadOnly bool
	// RefreshInterval is how often a queue that open pages show is counted again (one
	// inspect.Stats pass, shared by all of them), and how often the pages ask the handler
	// for the result. At least MinRefreshInterval. Defaults to DefaultRefreshInterval.
	RefreshInterval time.Duration
	// PeekSize is how many due tasks a queue's page lists, at most inspect.MaxPeek.
	// Defaults to DefaultPeekSize.
	PeekSize int
	// DeadLetterPage is how many dead letters one page lists, at most
	// inspect.MaxDeadLetterLimit. Defaults to DefaultDeadLetterPage.
	DeadLetterPage int
	// Clock tells what is due now, and when a rescheduled task is due. Defaults to the
	// cluster's time, as the inspector's and producer's.
	Clock shardqtype.Clock
	// Logger receives the failures of refresh passes and actions. Defaults to a logger
	// that discards.
	Logger *slog.Logger
}

// Handler serves the dashboard. It is safe for concurrent use; Close stops its refresh
// loops.
type Handler struct {
	cfg    Config
	driver *shardqtype.Driver
	in     *inspect.Inspector
	prod   *producer.Producer
	series *series.Client
	watch  *watcher
	csrf   csrf
	pages  map[string]*template.Template
	mux    http.Handler
}

//go:embed templates static
var assets embed.FS

// New returns a Handler reading and acting through session, whose keyspace holds
// shardq's tables.
func New(d *shardqtype.Driver, cfg Config) (*Handler, error) {
	if d == nil {
		return nil, defaults.Invalid("driver", "is nil")
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")) {
		return nil, defaults.Invalid("Config.Prefix", "%q: give a path that starts with / and does not end with one, such as /shardq", cfg.Prefix)
	}
	switch {
	case cfg.RefreshInterval == 0:
		cfg.RefreshInterval = DefaultRefreshInterval
	case cfg.RefreshInterval < MinRefreshInterval:
		return nil, defaults.Invalid("Config.RefreshInterval", "%v is shorter than %v: each pass reads the whole lap", cfg.RefreshInterval, MinRefreshInterval)
	}
	switch {
	case cfg.PeekSize == 0:
		cfg.PeekSize = DefaultPeekSize
	case cfg.PeekSize < 0 || cfg.PeekSize > inspect.MaxPeek:
		return nil, defaults.Invalid("Config.PeekSize", "%d is not in [1, %d]", cfg.PeekSize, inspect.MaxPeek)
	}
	switch {
	case cfg.DeadLetterPage == 0:
		cfg.DeadLetterPage = DefaultDeadLetterPage
	case cfg.DeadLetterPage < 0 || cfg.DeadLetterPage > inspect.MaxDeadLetterLimit:
		return nil, defaults.Invalid("Config.DeadLetterPage", "%d is not in [1, %d]", cfg.DeadLetterPage, inspect.MaxDeadLetterLimit)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = sessionstate.For(d, cfg.Logger).Cluster
	}
	in, err := inspect.New(d, inspect.Config{Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	prod, err := producer.New(d, producer.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	sc, err := series.New(d, series.Config{Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("shardqui: making the CSRF secret: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, driver: d, in: in, prod: prod, series: sc, pages: pages,
		watch: newWatcher(in, cfg.RefreshInterval, cfg.Logger),
		csrf:  csrf{secret: secret, path: cfg.Prefix + "/"}}
	h.mux = h.routes()
	return h, nil
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// The dashboard's own script and styles only: a payload that slipped past escaping
	// still could not run.
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	h.mux.ServeHTTP(w, r)
}

// Close stops the refresh loops. Pages served after it fail.
func (h *Handler) Close() { h.watch.close() }

func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", h.queuesPage)
	mux.HandleFunc("GET /api/queues", h.queuesJSON)
	mux.HandleFunc("GET /queues/{queue}", h.queuePage)
	mux.HandleFunc("GET /api/queues/{queue}", h.queueJSON)
	mux.HandleFunc("GET /task", h.taskPage)
	mux.HandleFunc("GET /queues/{queue}/series", h.seriesPage)
	mux.HandleFunc("GET /queues/{queue}/dead", h.deadPage)
	for path, do := range map[string]func(http.ResponseWriter, *http.Request){
		"/task/cancel":                    h.cancel,
		"/task/reschedule":                h.reschedule,
		"/queues/{queue}/pause":           h.queueAction(true),
		"/queues/{queue}/resume":          h.queueAction(false),
		"/queues/{queue}/series/pause":    h.seriesAction(true),
		"/queues/{queue}/series/resume":   h.seriesAction(false),
		"/queues/{queue}/dead/replay":     h.deadAction(deadReplay),
		"/queues/{queue}/dead/purge":      h.deadAction(deadPurge),
		"/queues/{queue}/dead/replay-all": h.deadAction(deadReplayAll),
		"/queues/{queue}/dead/purge-all":  h.deadAction(deadPurgeAll),
	} {
		mux.HandleFunc("POST "+path, h.action(do))
	}
	var out http.Handler = mux
	if h.cfg.Prefix != "" {
		out = http.StripPrefix(h.cfg.Prefix, mux)
	}
	return out
}

// action guards a POST: refused in read-only mode and without the form's CSRF token.
func (h *Handler) action(do func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			h.fail(w, r, http.StatusForbidden, errors.New("this dashboard is read-only"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("reading the form: %w", err))
			return
		}
		if !h.csrf.valid(r) {
			h.fail(w, r, http.StatusForbidden, errors.New("the form's CSRF token is missing or wrong: reload the page and try again"))
			return
		}
		do(w, r)
	}
}

// link is a path of the dashboard as the browser sees it.
func (h *Handler) link(path string) string { return h.cfg.Prefix + path }
