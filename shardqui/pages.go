package shardqui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
)

// page is what every template gets.
type page struct {
	Title    string
	Prefix   string
	ReadOnly bool
	CSRF     string
	Refresh  int64  // ms between the page's polls
	Message  string // what the action that led here did
	Error    string
	Data     any
}

var pageFiles = []string{"queues", "queue", "task", "series", "dead", "confirm", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"when": when,
		"age":  age,
		"path": url.PathEscape,
		"text": preview,
	}
	out := map[string]*template.Template{}
	for _, name := range pageFiles {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("shardqui: parsing template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any, msg string) {
	p := page{Title: title, Prefix: h.cfg.Prefix, ReadOnly: h.cfg.ReadOnly, CSRF: h.csrf.token(w, r),
		Refresh: h.cfg.RefreshInterval.Milliseconds(), Message: msg, Data: data}
	if err, ok := data.(error); ok {
		p.Error, p.Data = err.Error(), nil
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := h.pages[name].ExecuteTemplate(w, "layout", p); err != nil {
		h.cfg.Logger.Warn("shardqui: rendering a page failed", "page", name, "err", err)
	}
}

// fail shows err with status, as a page or, for the JSON API, as JSON.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		h.cfg.Logger.Warn("shardqui: request failed", "path", r.URL.Path, "err", err)
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		h.json(w, status, map[string]string{"error": err.Error()})
		return
	}
	h.render(w, r, status, "error", http.StatusText(status), err, "")
}

// failed shows an error of the library with the status it calls for.
func (h *Handler) failed(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, shardqtype.ErrQueueNotFound), errors.Is(err, shardqtype.ErrTaskNotFound),
		errors.Is(err, producer.ErrDeadLetterNotFound), errors.Is(err, series.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, shardqtype.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, shardqtype.ErrTaskInFlight):
		status = http.StatusConflict
	case errors.Is(err, context.Canceled):
		return // the browser went away
	}
	h.fail(w, r, status, err)
}

func (h *Handler) json(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a write error means the client went away
}

func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	http.Redirect(w, r, h.link(path)+"?"+q.Encode(), http.StatusSeeOther)
}

// done is the message of an action that redirected here: fixed texts, so a link
// cannot put words in the dashboard's mouth.
func done(r *http.Request) string {
	n := r.URL.Query().Get("n")
	if _, err := strconv.Atoi(n); err != nil {
		n = "?"
	}
	switch r.URL.Query().Get("done") {
	case "cancelled":
		return "Task cancelled: it will not be delivered again."
	case "rescheduled":
		return "Task rescheduled."
	case "replayed":
		return "Dead letter replayed: this is its task, back in the queue."
	case "purged":
		return "Dead letter purged."
	case "replayed-all":
		return n + " dead letters replayed."
	case "purged-all":
		return n + " dead letters purged."
	case "paused":
		return "Series paused."
	case "resumed":
		return "Series resumed."
	case "queue-paused":
		return "Queue paused: workers take none of its tasks from at most " + shardqtype.SettingsRefresh.String() + " from now."
	case "queue-resumed":
		return "Queue resumed: workers take its tasks again within " + (2 * shardqtype.SettingsRefresh).String() + "."
	}
	return ""
}

// queueRow is a queue's line on the queues page, and in its JSON.
type queueRow struct {
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	Layout    string `json:"layout"`
	Due       int    `json:"due"`
	Scheduled int    `json:"scheduled"`
	InFlight  int    `json:"in_flight"`
	Retrying  int    `json:"retrying"`
	Dead      int    `json:"dead"`
	Oldest    string `json:"oldest"` // the oldest due task's age
	Error     string `json:"error,omitempty"`
}

func layoutText(q shardqtype.QueueConfig) string {
	return fmt.Sprintf("%d shards × %d buckets of %v (lap %v)", q.ShardCount, q.BucketCount, q.BucketDuration, q.Layout().Lap())
}

func (h *Handler) queueRows(ctx context.Context) ([]queueRow, error) {
	qs, err := h.in.Queues(ctx)
	if err != nil {
		return nil, err
	}
	rows := make([]queueRow, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		rows[i] = queueRow{Name: q.Config.Name, Paused: q.Paused, Layout: layoutText(q.Config)}
		wg.Go(func() {
			snap, err := h.watch.get(ctx, q.Config.Name)
			if err == nil {
				err = snap.err
			}
			if err != nil {
				rows[i].Error = err.Error()
			}
			if st := snap.stats; st != nil {
				rows[i].Due, rows[i].Scheduled = st.Total.Due+st.Total.DueAgain, st.Total.Scheduled
				rows[i].InFlight, rows[i].Retrying, rows[i].Dead = st.Total.InFlight, st.Total.Retrying, st.DeadLetters
				rows[i].Oldest = oldest(st)
			}
		})
	}
	wg.Wait()
	return rows, ctx.Err()
}

func oldest(st *inspect.Stats) string {
	if st.OldestDue.IsZero() {
		return "none due"
	}
	return age(st.At.Sub(st.OldestDue))
}

func (h *Handler) queuesPage(w http.ResponseWriter, r *http.Request) {
	rows, err := h.queueRows(r.Context())
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "queues", "Queues", rows, "")
}

func (h *Handler) queuesJSON(w http.ResponseWriter, r *http.Request) {
	rows, err := h.queueRows(r.Context())
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.json(w, http.StatusOK, map[string]any{"queues": rows})
}

// queueView is a queue's counts as its page and its JSON show them.
type queueView struct {
	Name     string         `json:"name"`
	Paused   bool           `json:"paused"`
	Layout   string         `json:"layout"`
	At       string         `json:"at"`
	Total    inspect.Counts `json:"total"`
	Oldest   string         `json:"oldest"`
	Dead     int            `json:"dead"`
	NowCol   int            `json:"now"` // the time shard of the bucket of At
	Pending  [][]int        `json:"pending"`
	DueCells [][]int        `json:"due"`
	Failed   int            `json:"failed"` // partitions the last pass could not read
	Error    string         `json:"error,omitempty"`
	History  []sample       `json:"history"`

	Shards  []int                 `json:"-"`
	Cols    []int                 `json:"-"`
	Peek    []shardqtype.TaskInfo `json:"-"`
	PeekErr string                `json:"-"`
}

// pending is what a heatmap cell counts: the tasks waiting in the partition, due or not.
// Tasks in flight are consumers', not waiting.
func pending(c inspect.Counts) int { return c.Due + c.DueAgain + c.Scheduled + c.Retrying }

// level buckets a cell's count by order of magnitude, for its colour; app.js does the same.
func level(n int) int {
	l := 0
	for ; n > 0 && l < 6; n /= 10 {
		l++
	}
	return l
}

func (h *Handler) queueView(ctx context.Context, name string) (*queueView, error) {
	info, err := h.in.Queue(ctx, name)
	if err != nil {
		return nil, err
	}
	q := info.Config
	snap, err := h.watch.get(ctx, name)
	if err != nil {
		return nil, err
	}
	v := &queueView{Name: name, Paused: info.Paused, Layout: layoutText(q), History: snap.history}
	if snap.err != nil {
		v.Error = snap.err.Error()
	}
	// The picture is of the layout in force, the first until the queue is resized.
	l := q.Layout()
	st := snap.stats
	if st != nil {
		l = st.Layout
	}
	for s := range l.ShardCount {
		v.Shards = append(v.Shards, s)
	}
	for b := range l.BucketCount {
		v.Cols = append(v.Cols, b)
	}
	if st == nil {
		return v, nil
	}
	v.At, v.Total, v.Oldest, v.Dead, v.Failed = when(st.At), st.Total, oldest(st), st.DeadLetters, len(st.Failed)
	v.NowCol = l.TimeShard(l.Bucket(st.At))
	for _, cells := range st.Lap {
		p, d := make([]int, len(cells)), make([]int, len(cells))
		for i, c := range cells {
			p[i], d[i] = pending(c), c.Due+c.DueAgain
		}
		v.Pending, v.DueCells = append(v.Pending, p), append(v.DueCells, d)
	}
	return v, nil
}

func (h *Handler) queuePage(w http.ResponseWriter, r *http.Request) {
	// The peek runs beside the wait for the queue's counts, which a first visitor waits
	// for a whole pass over the lap.
	name := r.PathValue("queue")
	var peeked *inspect.Peeked
	var peekErr error
	var peeking sync.WaitGroup
	peeking.Go(func() { peeked, peekErr = h.in.Peek(r.Context(), name, h.cfg.PeekSize) })
	v, err := h.queueView(r.Context(), name)
	peeking.Wait()
	if err != nil {
		h.failed(w, r, err)
		return
	}
	if peekErr != nil {
		v.PeekErr = peekErr.Error()
	} else {
		v.Peek = peeked.Tasks
		if len(peeked.Failed) > 0 {
			v.PeekErr = fmt.Sprintf("%d partitions could not be read; the first: %v", len(peeked.Failed), peeked.Failed[0])
		}
	}
	h.render(w, r, http.StatusOK, "queue", "Queue "+v.Name, heatmapPage{v, h.cfg.Prefix}, done(r))
}

// heatmapPage gives the queue template the cells' classes.
type heatmapPage struct {
	*queueView
	prefix string
}

// Cell is one cell of the heatmap.
type Cell struct {
	Level, Pending, Due int
	Now                 bool
}

// Cell returns shard s's cell of time shard b.
func (p heatmapPage) Cell(s, b int) Cell {
	c := Cell{Now: b == p.NowCol}
	if s < len(p.Pending) {
		c.Pending, c.Due = p.Pending[s][b], p.DueCells[s][b]
		c.Level = level(c.Pending)
	}
	return c
}

func (h *Handler) queueJSON(w http.ResponseWriter, r *http.Request) {
	v, err := h.queueView(r.Context(), r.PathValue("queue"))
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.json(w, http.StatusOK, v)
}

// taskView is a task page's task.
type taskView struct {
	*shardqtype.TaskInfo
	Payload payloadView
	Pending bool // scheduled or retrying: it can be cancelled and rescheduled
	Held    bool // in flight: it can be cancelled after its lease
}

func (h *Handler) taskPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var info *shardqtype.TaskInfo
	var err error
	switch id, queue, key := q.Get("id"), q.Get("queue"), q.Get("key"); {
	case id != "":
		var u uuid.UUID
		if u, err = uuid.Parse(id); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a task ID", id))
			return
		}
		info, err = h.in.Task(r.Context(), u)
	case queue != "" && key != "":
		info, err = h.in.TaskByKey(r.Context(), queue, key)
	default:
		h.fail(w, r, http.StatusBadRequest, errors.New("give a task ID (id), or a queue and a unique key (queue and key)"))
		return
	}
	if err != nil {
		h.failed(w, r, err)
		return
	}
	v := taskView{TaskInfo: info, Payload: viewPayload(info.Payload),
		Pending: info.State == shardqtype.TaskScheduled || info.State == shardqtype.TaskRetrying, Held: info.State == shardqtype.TaskInFlight}
	h.render(w, r, http.StatusOK, "task", "Task "+info.ID.String(), v, done(r))
}

// formID reads the task or dead letter ID of an action's form.
func formID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PostForm.Get("id"))
	if err != nil {
		return uuid.Nil, defaults.Invalid("id", "%q is not an ID", r.PostForm.Get("id"))
	}
	return id, nil
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, err := formID(r)
	if err == nil {
		err = h.prod.Cancel(r.Context(), id, producer.CancelOptions{AfterLease: r.PostForm.Get("after_lease") == "1"})
	}
	if err != nil {
		h.failed(w, r, err)
		return
	}
	// A cancelled task is not found any more: back to its queue.
	h.redirect(w, r, "/queues/"+url.PathEscape(r.PostForm.Get("queue")), url.Values{"done": {"cancelled"}})
}

// reschedule moves a task to the form's due time: a duration from now ("10m") or an
// RFC 3339 time; and to its priority when given.
func (h *Handler) reschedule(w http.ResponseWriter, r *http.Request) {
	id, err := formID(r)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	var opts producer.RescheduleOptions
	due := strings.TrimSpace(r.PostForm.Get("due"))
	if d, err := time.ParseDuration(due); err == nil {
		opts.DueAt = h.cfg.Clock.Now().Add(d)
	} else if opts.DueAt, err = time.Parse(time.RFC3339, due); err != nil && due != "" {
		h.failed(w, r, defaults.Invalid("due", "%q is neither a duration from now (10m) nor an RFC 3339 time", due))
		return
	}
	if p := strings.TrimSpace(r.PostForm.Get("priority")); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			h.failed(w, r, defaults.Invalid("priority", "%q is not a number", p))
			return
		}
		opts.Priority = &n
	}
	if err := h.prod.Reschedule(r.Context(), id, opts); err != nil {
		h.failed(w, r, err)
		return
	}
	h.redirect(w, r, "/task", url.Values{"id": {id.String()}, "done": {"rescheduled"}})
}

type seriesView struct {
	Queue  string
	Series []*series.Info
}

func (h *Handler) seriesPage(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	list, err := h.series.List(r.Context(), queue)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "series", "Series of "+queue, seriesView{Queue: queue, Series: list}, done(r))
}

// queueAction pauses or resumes a queue.
func (h *Handler) queueAction(pause bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		queue := r.PathValue("queue")
		do, msg := shardq.ResumeQueue, "queue-resumed"
		if pause {
			do, msg = shardq.PauseQueue, "queue-paused"
		}
		if err := do(r.Context(), h.driver, queue); err != nil {
			h.failed(w, r, err)
			return
		}
		h.redirect(w, r, "/queues/"+url.PathEscape(queue), url.Values{"done": {msg}})
	}
}

func (h *Handler) seriesAction(pause bool) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		queue, name := r.PathValue("queue"), r.PostForm.Get("name")
		do, msg := h.series.Resume, "resumed"
		if pause {
			do, msg = h.series.Pause, "paused"
		}
		if err := do(r.Context(), queue, name); err != nil {
			h.failed(w, r, err)
			return
		}
		h.redirect(w, r, "/queues/"+url.PathEscape(queue)+"/series", url.Values{"done": {msg}})
	}
}

type deadView struct {
	Queue   string
	Letters []deadLetter
	Next    string // the Before of the next page; empty on the last
}

type deadLetter struct {
	shardqtype.TaskInfo
	Payload payloadView
}

func (h *Handler) deadPage(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	q := inspect.DeadLetterQuery{Limit: h.cfg.DeadLetterPage}
	if b := r.URL.Query().Get("before"); b != "" {
		var err error
		if q.Before, err = uuid.Parse(b); err != nil {
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("before: %q is not a dead letter ID", b))
			return
		}
	}
	letters, err := h.in.DeadLetters(r.Context(), queue, q)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	v := deadView{Queue: queue}
	for _, l := range letters {
		v.Letters = append(v.Letters, deadLetter{TaskInfo: l, Payload: viewPayload(l.Payload)})
	}
	if len(letters) == q.Limit {
		v.Next = letters[len(letters)-1].DeadLetterID.String()
	}
	h.render(w, r, http.StatusOK, "dead", "Dead letters of "+queue, v, done(r))
}

// deadOp is an action on dead letters.
type deadOp int

const (
	deadReplay deadOp = iota
	deadPurge
	deadReplayAll
	deadPurgeAll
)

// confirmView asks before an action on dead letters is taken.
type confirmView struct {
	Queue    string
	Action   string // the form's path, below the prefix
	ID       string // the letter's, for one
	Question string
	Button   string
}

func (h *Handler) deadAction(op deadOp) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		queue := r.PathValue("queue")
		var id uuid.UUID
		if op == deadReplay || op == deadPurge {
			var err error
			if id, err = formID(r); err != nil {
				h.failed(w, r, err)
				return
			}
		}
		if r.PostForm.Get("confirm") != "yes" {
			h.confirm(w, r, op, queue, id)
			return
		}
		ctx := r.Context()
		back := "/queues/" + url.PathEscape(queue) + "/dead"
		var n int
		var err error
		switch op {
		case deadReplay:
			var task uuid.UUID
			if task, err = h.prod.ReplayDeadLetter(ctx, queue, id); err == nil {
				h.redirect(w, r, "/task", url.Values{"id": {task.String()}, "done": {"replayed"}})
				return
			}
		case deadPurge:
			if err = h.prod.PurgeDeadLetter(ctx, queue, id); err == nil {
				h.redirect(w, r, back, url.Values{"done": {"purged"}})
				return
			}
		case deadReplayAll:
			n, err = h.prod.ReplayAllDeadLetters(ctx, queue, producer.BulkOptions{})
		case deadPurgeAll:
			n, err = h.prod.PurgeAllDeadLetters(ctx, queue, producer.BulkOptions{})
		}
		if err != nil {
			h.failed(w, r, err)
			return
		}
		msg := map[deadOp]string{deadReplayAll: "replayed-all", deadPurgeAll: "purged-all"}[op]
		h.redirect(w, r, back, url.Values{"done": {msg}, "n": {strconv.Itoa(n)}})
	}
}

func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, op deadOp, queue string, id uuid.UUID) {
	v := confirmView{Queue: queue, Action: "/queues/" + url.PathEscape(queue) + "/dead/"}
	switch op {
	case deadReplay:
		v.Action += "replay"
		v.Question = fmt.Sprintf("Replay dead letter %s? Its task goes back into queue %s, attempts reset.", id, queue)
		v.Button = "Replay"
	case deadPurge:
		v.Action += "purge"
		v.Question = fmt.Sprintf("Purge dead letter %s? It is deleted for good.", id)
		v.Button = "Purge"
	case deadReplayAll:
		v.Action += "replay-all"
		v.Question = fmt.Sprintf("Replay every dead letter of queue %s? Their tasks go back into the queue, attempts reset.", queue)
		v.Button = "Replay all"
	case deadPurgeAll:
		v.Action += "purge-all"
		v.Question = fmt.Sprintf("Purge every dead letter of queue %s? They are deleted for good.", queue)
		v.Button = "Purge all"
	}
	if id != uuid.Nil {
		v.ID = id.String()
	}
	h.render(w, r, http.StatusOK, "confirm", "Confirm", v, "")
}
