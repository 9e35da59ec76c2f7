package shardq

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shard"
	"github.com/shardq/shardq/shardqtype"
)

// PauseQueue pauses queue name: consumers take no task of it (AcquireTasks returns
// ErrQueuePaused) from at most SettingsRefresh after it returns, until ResumeQueue.
// Producers keep scheduling, series keep their occurrences, and tasks in flight run,
// extend, retry and ack as usual. Pausing a paused queue does nothing. It returns
// ErrQueueNotFound when no such queue exists.
func PauseQueue(ctx context.Context, d *shardqtype.Driver, name string) error {
	return setPaused(ctx, sessionstate.For(d, nil).Store.Queues(), name, true)
}

// ResumeQueue undoes PauseQueue: consumers take queue name's tasks again from at most
// SettingsRefresh after it returns (a worker that found it paused looks again every
// SettingsRefresh, so it starts within twice that). Resuming a running queue does
// nothing. It returns ErrQueueNotFound when no such queue exists.
func ResumeQueue(ctx context.Context, d *shardqtype.Driver, name string) error {
	return setPaused(ctx, sessionstate.For(d, nil).Store.Queues(), name, false)
}

func setPaused(ctx context.Context, queues store.Queues, name string, paused bool) error {
	if !shard.ValidQueueName(name) {
		return defaults.Invalid("queue name", "%q is not 1 to 63 of a-z 0-9 _ . - starting with a letter or digit", name)
	}
	verb := map[bool]string{true: "pausing", false: "resuming"}[paused]
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		return queues.SetPaused(ctx, name, paused)
	}, func(rctx context.Context, cause error) (bool, error) {
		// Setting the flag is idempotent, so a straggler needs no voiding: a SERIAL read
		// that finds it as asked means the write (ours or another caller's) took effect.
		st, rerr := queues.Status(rctx, name, true)
		switch {
		case errors.Is(rerr, store.ErrNotFound):
			return false, nil
		case rerr != nil:
			return false, fmt.Errorf("%w: %w (reading it back: %w)", lwt.ErrOutcomeUnknown, cause, rerr)
		case st.Paused != paused:
			return false, fmt.Errorf("%w (not stored when read back)", cause)
		}
		return true, nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("shardq: %s queue %q: %w", verb, name, err)
	case !applied:
		return fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	return nil
}
