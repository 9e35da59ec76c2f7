package series

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Daily at 02:30 in Paris: the night 02:30 is skipped it runs at 03:00, when the clock
// jumps; the night 02:30 comes twice it runs once. An every-hour expression runs in both
// repeated hours, by the clock.
func TestCronDaylightSaving(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	run := func(expr string, from time.Time, n int) []time.Time {
		sc, err := Spec{Cron: expr, TimeZone: "Europe/Paris"}.Schedule()
		require.NoError(t, err)
		var out []time.Time
		for at := sc.first(time.Time{}, from); len(out) < n; at = sc.after(at) {
			out = append(out, at)
		}
		return out
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, []time.Time{utc("2026-03-28T01:30:00Z"), utc("2026-03-29T01:00:00Z"), utc("2026-03-30T00:30:00Z")},
		utcs(run("30 2 * * *", time.Date(2026, 3, 27, 12, 0, 0, 0, paris), 3)))
	require.Equal(t, []time.Time{utc("2026-10-24T00:30:00Z"), utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")},
		utcs(run("30 2 * * *", time.Date(2026, 10, 23, 12, 0, 0, 0, paris), 3)))
	require.Equal(t, []time.Time{utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z"), utc("2026-10-25T02:30:00Z")},
		utcs(run("30 * * * *", utc("2026-10-25T00:00:00Z"), 3)))
	require.Equal(t, []time.Time{utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z")},
		utcs(run("30 * * * *", time.Date(2026, 3, 29, 1, 0, 0, 0, paris), 2)))
	require.Equal(t, []time.Time{utc("2026-01-05T12:00:10Z"), utc("2026-01-05T12:00:20Z")},
		utcs(run("*/10 * * * * *", time.Date(2026, 1, 5, 12, 0, 1, 0, time.UTC), 2)), "six fields: seconds first")
}

func utcs(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}
