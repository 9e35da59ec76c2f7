// Package series keeps recurring series: their stored state, the schedule of their
// occurrences, and the one step that moves a series from one occurrence to the next,
// shared by the consumer (on take, ack and dead letter), the public series package and
// the worker's keeper.
package series

import (
	"encoding/json"
	"fmt"
	"time"

	cron "github.com/netresearch/go-cron"
)

// Spec is what a series is: how often it runs and what each occurrence carries. It is
// stored as JSON, and two creates of one series name are the same when their Specs are.
type Spec struct {
	Every    time.Duration `json:"every,omitempty"`
	Cron     string        `json:"cron,omitempty"`
	TimeZone string        `json:"time_zone,omitempty"`
	Start    time.Time     `json:"start,omitzero"`
	End      time.Time     `json:"end,omitzero"`
	Count    int64         `json:"count,omitempty"`
	Payload  []byte        `json:"payload,omitempty"`
	Priority int           `json:"priority,omitempty"`
	Timeout  time.Duration `json:"timeout,omitempty"`
	CatchUp  bool          `json:"catch_up,omitempty"`
	OnTake   bool          `json:"on_take,omitempty"`
	Kind     string        `json:"kind,omitempty"`
}

// MinEvery is the shortest interval of a series.
const MinEvery = time.Second

// parser reads 5 fields, or 6 with seconds first, and descriptors such as @daily.
var parser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule says when a Spec's occurrences fall.
type Schedule struct {
	every time.Duration
	cron  cron.Schedule
}

// Schedule checks s's timing fields and returns its schedule. Errors name the field.
func (s Spec) Schedule() (Schedule, error) {
	switch {
	case s.Every != 0 && s.Cron != "":
		return Schedule{}, fieldError{"Every", "and Cron are both set; a series runs by one of them"}
	case s.Every == 0 && s.Cron == "":
		return Schedule{}, fieldError{"Every", "and Cron are both empty; set one"}
	case s.Count < 0:
		return Schedule{}, fieldError{"Count", fmt.Sprintf("%d is negative", s.Count)}
	case !s.End.IsZero() && !s.Start.IsZero() && s.End.Before(s.Start):
		return Schedule{}, fieldError{"End", fmt.Sprintf("%v is before Start %v", s.End, s.Start)}
	case s.Every != 0:
		if s.Every < MinEvery || s.Every%time.Millisecond != 0 {
			return Schedule{}, fieldError{"Every", fmt.Sprintf("%v is not a whole number of milliseconds of at least %v", s.Every, MinEvery)}
		}
		if s.TimeZone != "" {
			return Schedule{}, fieldError{"TimeZone", "applies to Cron only"}
		}
		return Schedule{every: s.Every}, nil
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return Schedule{}, fieldError{"TimeZone", err.Error()}
	}
	c, err := parser.Parse("TZ=" + tz + " " + s.Cron)
	if err != nil {
		return Schedule{}, fieldError{"Cron", err.Error()}
	}
	return Schedule{cron: c}, nil
}

type fieldError struct{ field, reason string }

func (e fieldError) Error() string { return e.field + " " + e.reason }

// Field and Reason let callers turn the error into a validation error of their own.
func (e fieldError) Field() string  { return e.field }
func (e fieldError) Reason() string { return e.reason }

// first is the first occurrence at or after t, counting an interval from anchor.
func (sc Schedule) first(anchor, t time.Time) time.Time {
	if sc.every == 0 {
		return sc.cronNext(t.Add(-time.Nanosecond))
	}
	if !t.After(anchor) {
		return anchor
	}
	n := (t.Sub(anchor) + sc.every - 1) / sc.every
	return anchor.Add(n * sc.every)
}

// after is the first occurrence after t (zero if the cron expression has none left).
func (sc Schedule) after(t time.Time) time.Time {
	if sc.every == 0 {
		return sc.cronNext(t)
	}
	return t.Add(sc.every)
}

// cronNext is the cron expression's first time after t, with one rule for daylight-saving
// changes whatever the library does with them: a time that the clock skips runs when
// the clock jumps past it, and a time of a fixed hour that the clock shows twice runs
// only the first time. (An expression of every hour runs by the clock in both hours.)
func (sc Schedule) cronNext(t time.Time) time.Time {
	n := sc.cron.Next(t)
	spec, ok := sc.cron.(*cron.SpecSchedule)
	if !ok || n.IsZero() {
		return n
	}
	wall := n.In(spec.Location)
	if spec.Hour&(1<<uint(wall.Hour())) == 0 {
		// The library moved a skipped time past the gap: run it at the jump, once.
		if jump := shift(n.Add(-3*time.Hour), n, spec.Location); !jump.IsZero() && jump.After(t) {
			return jump
		}
		return sc.cronNext(n)
	}
	if spec.Hour&(1<<24-1) != 1<<24-1 && repeated(n, spec.Location) {
		return sc.cronNext(n)
	}
	return n
}

// shift is the instant in (a, b] at which loc's offset changes, or zero if it does not.
func shift(a, b time.Time, loc *time.Location) time.Time {
	_, off := a.In(loc).Zone()
	if _, offB := b.In(loc).Zone(); offB == off {
		return time.Time{}
	}
	for b.Sub(a) > time.Second {
		mid := a.Add(b.Sub(a) / 2)
		if _, o := mid.In(loc).Zone(); o == off {
			a = mid
		} else {
			b = mid
		}
	}
	return b.Truncate(time.Second)
}

// repeated reports whether the wall-clock time of t in loc was shown before, in the hour
// that a change back from daylight-saving time repeats.
func repeated(t time.Time, loc *time.Location) bool {
	_, now := t.In(loc).Zone()
	_, before := t.Add(-3 * time.Hour).In(loc).Zone()
	if before <= now {
		return false
	}
	earlier := t.Add(-time.Duration(before-now) * time.Second).In(loc)
	w := t.In(loc)
	return earlier.Hour() == w.Hour() && earlier.Minute() == w.Minute() && earlier.Second() == w.Second() && earlier.Day() == w.Day()
}

// Encode returns s as stored.
func (s Spec) Encode() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a Spec has only plain fields
	}
	return string(b)
}

func decode(text string) (Spec, error) {
	var s Spec
	err := json.Unmarshal([]byte(text), &s)
	return s, err
}
