package sessionstate

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/memstore"
)

// A State made by a part without a logger (CreateQueue, say, or a producer configured
// without one) passes its shared parts' warnings to the first logger a later part asks
// with that writes somewhere, with the attributes and groups
// they were given before it came, and to no other after.
func TestLaterLoggerGetsTheWarnings(t *testing.T) {
	t.Parallel()
	cluster, err := memstore.New(memstore.Config{Now: time.Now})
	require.NoError(t, err)
	d := driver.New(nil)
	Bind(d, New(cluster.Client(memstore.ClientConfig{Clock: time.Now}), nil, nil))
	st := For(d, nil)
	For(d, slog.New(slog.DiscardHandler)) // a part configured without a Logger
	log := slog.New(st.log).With("part", "toucher").WithGroup("g")
	log.Warn("before any logger")

	var first, second bytes.Buffer
	text := func(b *bytes.Buffer) *slog.Logger {
		return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	}
	require.Same(t, st, For(d, text(&first)))
	For(d, text(&second))
	log.Warn("after", "k", 1)
	log.Debug("below the level")
	require.Equal(t, "level=WARN msg=after part=toucher g.k=1\n", first.String())
	require.Empty(t, second.String())
}
