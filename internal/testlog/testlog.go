// Package testlog keeps what a part logs, for the tests that check it.
package testlog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps each record at or above its level as one line:
// the message, then every attribute as key=value (those given by With first). Safe for
// concurrent use.
type Recorder struct {
	min  slog.Level
	mu   *sync.Mutex
	recs *[]record
	with string // the attributes given by WithAttrs, as they appear in a line
}

// New returns a Recorder that keeps records at level min and above.
func New(min slog.Level) *Recorder {
	return &Recorder{min: min, mu: &sync.Mutex{}, recs: new([]record)}
}

// Logger returns a logger that writes to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

func (r *Recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.min }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message + r.with
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.recs = append(*r.recs, record{msg: rec.Message, line: line})
	return nil
}

func (r *Recorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	for _, a := range as {
		c.with += " " + a.String()
	}
	return &c
}

// WithGroup is ignored: no part under test logs in groups.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

type record struct{ msg, line string }

// Lines returns every record kept so far, in order.
func (r *Recorder) Lines() []string { return r.lines(func(record) bool { return true }) }

// Find returns the records whose message is msg.
func (r *Recorder) Find(msg string) []string {
	return r.lines(func(rec record) bool { return rec.msg == msg })
}

func (r *Recorder) lines(keep func(record) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range *r.recs {
		if keep(rec) {
			out = append(out, rec.line)
		}
	}
	return out
}

// Count returns how many records hold s, in their message or an attribute.
func (r *Recorder) Count(s string) int {
	n := 0
	for _, l := range r.Lines() {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}
