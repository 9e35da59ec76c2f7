// Package taskmeta names the headers the library keeps with a task for itself (its
// snoozes, its own attempt limit) beside the user's, under a prefix users cannot write
// through the client, and reads them back.
package taskmeta

import (
	"maps"
	"strconv"
	"strings"
)

// The library's headers.
const (
	// Prefix starts every header of the library's; producers through the client refuse
	// user headers that start with it.
	Prefix = "shardq-"
	// Snoozes counts the deliveries a handler snoozed: they are not attempts.
	Snoozes = Prefix + "snoozes"
	// MaxAttempts is the task's own limit of attempts, when its insert set one.
	MaxAttempts = Prefix + "max-attempts"
)

// Int reads header key of h as a whole number, 0 when absent or malformed.
func Int(h map[string]string, key string) int {
	n, err := strconv.Atoi(h[key])
	if err != nil {
		return 0
	}
	return n
}

// MaxAttemptsOr is the attempts a task with headers h gets: its own limit when its
// insert set one, def otherwise.
func MaxAttemptsOr(h map[string]string, def int) int {
	if n := Int(h, MaxAttempts); n > 0 {
		return n
	}
	return def
}

// WithInt returns a copy of h with key set to n.
func WithInt(h map[string]string, key string, n int) map[string]string {
	out := maps.Clone(h)
	if out == nil {
		out = make(map[string]string, 1)
	}
	out[key] = strconv.Itoa(n)
	return out
}

// User returns h without the library's headers: nil when none is left.
func User(h map[string]string) map[string]string {
	var out map[string]string
	for k, v := range h {
		if strings.HasPrefix(k, Prefix) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = v
	}
	return out
}

// Without returns h without key: h itself when it has no such key, nil when none is left.
func Without(h map[string]string, key string) map[string]string {
	if _, ok := h[key]; !ok {
		return h
	}
	out := maps.Clone(h)
	delete(out, key)
	if len(out) == 0 {
		return nil
	}
	return out
}
