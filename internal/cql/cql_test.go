package cql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gocql/gocql"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cql"
)

// A request refused for what it is would be refused again; one that found no replica, or
// timed out, may pass when sent again.
func TestRefused(t *testing.T) {
	t.Parallel()
	require.True(t, cql.Refused(fmt.Errorf("touching: %w", invalid{})))
	require.False(t, cql.Refused(&gocql.RequestErrUnavailable{}))
	require.False(t, cql.Refused(context.DeadlineExceeded))
	require.False(t, cql.Refused(errors.New("closed")))
	require.False(t, cql.Refused(nil))
}

type invalid struct{}

func (invalid) Error() string   { return "ttl is too large" }
func (invalid) Code() int       { return gocql.ErrCodeInvalid }
func (invalid) Message() string { return "ttl is too large" }
