package inspect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		attempt int
		isRetry bool
		visible time.Time
		want    class
	}{
		{0, false, now, due},
		{0, false, now.Add(-time.Hour), due},
		{1, false, now, dueAgain},
		{3, true, now.Add(-time.Second), dueAgain},
		{0, false, now.Add(time.Nanosecond), scheduled},
		{1, false, now.Add(time.Minute), inFlight},
		{2, true, now.Add(time.Minute), retrying},
	} {
		require.Equal(t, tc.want, classify(tc.attempt, tc.isRetry, tc.visible, now),
			"attempt %d retrying %v visible %v", tc.attempt, tc.isRetry, tc.visible.Sub(now))
	}
}
