package testlog_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/testlog"
)

func TestRecorder(t *testing.T) {
	t.Parallel()
	r := testlog.New(slog.LevelWarn)
	log := r.Logger().With("queue", "q")
	log.Info("below the level")
	log.Warn("extending a lease", "task", 7)
	log.Error("extending a lease failed")
	r.Logger().Warn("other")
	require.Equal(t, []string{"extending a lease queue=q task=7", "extending a lease failed queue=q", "other"}, r.Lines())
	require.Equal(t, []string{"extending a lease queue=q task=7"}, r.Find("extending a lease"))
	require.Equal(t, 2, r.Count("queue=q"))
}
