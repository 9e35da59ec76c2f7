package shardqui

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// when shows a time to the millisecond, in UTC.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// age shows a duration to a readable precision.
func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// maxShown is the most payload bytes a page shows; the size says when there are more.
const maxShown = 64 << 10

// payloadView is a payload as a page shows it. Templates escape Text; a payload that is
// not printable UTF-8 is shown only as hex and base64, which hold no markup.
type payloadView struct {
	Size      int
	Truncated bool
	IsText    bool
	Text      string
	Hex       string
	Base64    string
}

func viewPayload(b []byte) payloadView {
	v := payloadView{Size: len(b)}
	if len(b) > maxShown {
		b, v.Truncated = b[:maxShown], true
	}
	if isText(b) {
		v.IsText, v.Text = true, string(b)
		return v
	}
	v.Hex, v.Base64 = hex.Dump(b), base64.StdEncoding.EncodeToString(b)
	return v
}

// isText tells whether b reads as text: valid UTF-8 without control characters other
// than white space.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// preview is the start of a payload on one line, for lists.
func preview(b []byte) string {
	const n = 80
	if !isText(b) {
		return "(" + base64.StdEncoding.EncodeToString(b[:min(len(b), n*3/4)]) + " base64, " + strconv.Itoa(len(b)) + " bytes)"
	}
	s := []rune(string(b))
	if len(s) > n {
		return string(s[:n]) + "…"
	}
	return string(s)
}
