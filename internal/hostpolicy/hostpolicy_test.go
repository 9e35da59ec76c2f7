package hostpolicy

import (
	"context"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"
)

// oneHost is an inner policy that knows one node.
type oneHost struct {
	gocql.HostSelectionPolicy
	h *gocql.HostInfo
}

func (o oneHost) Pick(gocql.ExecutableQuery) gocql.NextHost {
	done := false
	return func() gocql.SelectedHost {
		if done {
			return nil
		}
		done = true
		return picked{o.h}
	}
}

type picked struct{ h *gocql.HostInfo }

func (p picked) Info() *gocql.HostInfo { return p.h }
func (p picked) Mark(error)            {}

// read is an idempotent query, as gocql sees it.
type read struct{ gocql.ExecutableQuery }

func (read) IsIdempotent() bool       { return true }
func (read) Context() context.Context { return context.Background() }

// gocql sends a speculative copy to whatever the iterator gives next, and takes a nil
// for the query's answer (ErrNoConnections) ahead of the attempt still running. So while
// an attempt runs, an exhausted line gives its first node once more; once every attempt
// was reported, it ends.
func TestExhaustedLineRepeatsFirstNodeWhileAnAttemptRuns(t *testing.T) {
	h := &gocql.HostInfo{}
	p := Wrap(oneHost{h: h}, Config{Slow: time.Second, Backoff: time.Second, MaxBackoff: time.Second})

	next := p.Pick(read{})
	first := next()
	require.Same(t, h, first.Info())
	again := next() // the speculative copy, while the first attempt runs
	require.NotNil(t, again)
	require.Same(t, h, again.Info())
	require.Nil(t, next(), "once only")
	first.Mark(nil)
	again.Mark(nil)

	next = p.Pick(read{})
	first = next()
	first.Mark(gocql.ErrTimeoutNoResponse)
	require.Nil(t, next(), "a retry after every attempt was reported finds the line ended")
}
