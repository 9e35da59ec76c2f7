package lwt_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/lwt"
)

// Apply returns a definite failure as it is, and hands an unknown one to settle.
func TestApplySettlesOnlyUnknownOutcomes(t *testing.T) {
	t.Parallel()
	settled := 0
	settle := func(context.Context, error) (bool, error) { settled++; return true, nil }
	unavailable := driver.NewError(driver.CodeUnavailable, false, "unavailable")
	_, err := lwt.Apply(context.Background(), func(context.Context) (bool, error) { return false, unavailable }, settle)
	require.ErrorIs(t, err, unavailable)
	require.Zero(t, settled)

	timeout := errors.New("no response")
	applied, err := lwt.Apply(context.Background(), func(context.Context) (bool, error) { return false, timeout }, settle)
	require.NoError(t, err)
	require.True(t, applied)
	require.Equal(t, 1, settled)
}

// A settle that fails leaves the outcome unknown even when what failed it was a refusal:
// the write it settles may have applied. Taken as definite, a swap's markers were dropped
// after its rows were deleted.
func TestFailedSettleIsNotDefinite(t *testing.T) {
	t.Parallel()
	overloaded := driver.NewError(driver.CodeOverloaded, false, "overloaded")
	require.True(t, lwt.Definite(overloaded))
	_, err := lwt.Apply(context.Background(),
		func(context.Context) (bool, error) { return false, driver.NewError(0, true, "no response") },
		func(_ context.Context, cause error) (bool, error) {
			return false, fmt.Errorf("%w: %w (releasing: %w)", lwt.ErrOutcomeUnknown, cause, overloaded)
		})
	require.ErrorIs(t, err, lwt.ErrOutcomeUnknown)
	require.ErrorIs(t, err, overloaded)
	require.False(t, lwt.Definite(err))
}

// Settling outlives the caller's cancellation, for ResolveTimeout, or until the time a
// caller that must be done by then set with SettleBy.
func TestResolveContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rctx, rcancel := lwt.ResolveContext(ctx)
	defer rcancel()
	require.NoError(t, rctx.Err(), "a cancelled caller still settles")
	d, ok := rctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(lwt.ResolveTimeout), d, time.Second)

	by := time.Now().Add(time.Second)
	rctx, rcancel = lwt.ResolveContext(lwt.SettleBy(ctx, by))
	defer rcancel()
	d, _ = rctx.Deadline()
	require.Equal(t, by, d)

	later := time.Now().Add(time.Hour)
	rctx, rcancel = lwt.ResolveContext(lwt.SettleBy(ctx, later))
	defer rcancel()
	d, _ = rctx.Deadline()
	require.True(t, d.Before(later), "ResolveTimeout still bounds it")
}
