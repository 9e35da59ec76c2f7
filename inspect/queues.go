package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/store"
)

// QueueInfo is a stored queue: its settings, when it was created and whether it is
// paused (shardq.PauseQueue).
type QueueInfo struct {
	Config    shardq.QueueConfig
	CreatedAt time.Time
	Paused    bool
}

// Queue reads one queue's settings, or returns an error matching shardq.ErrQueueNotFound.
func (in *Inspector) Queue(ctx context.Context, name string) (QueueInfo, error) {
	q, err := in.queue(ctx, name)
	if err != nil {
		return QueueInfo{}, err
	}
	at, err := in.state.Store.Queues().CreatedAt(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return QueueInfo{}, fmt.Errorf("inspect: reading when queue %q was created: %w", name, err)
	}
	paused, err := in.paused(ctx, name)
	if err != nil {
		return QueueInfo{}, err
	}
	return QueueInfo{Config: q.cfg, CreatedAt: at, Paused: paused}, nil
}

// paused reads whether queue name is paused now, not as a consumer's cache has it.
func (in *Inspector) paused(ctx context.Context, name string) (bool, error) {
	paused, err := in.state.Store.Queues().Paused(ctx, name, false)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("inspect: reading whether queue %q is paused: %w", name, err)
	}
	return paused, nil
}

// Queues reads every stored queue, by name. The queues table is small (one row a
// queue): it is read whole, in pages, and each queue's settings as Queue reads them.
func (in *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	created, err := in.state.Store.Queues().Created(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: listing queues: %w", err)
	}
	out := make([]QueueInfo, 0, len(created))
	for name, at := range created {
		q, err := in.queue(ctx, name)
		if err != nil {
			return nil, err
		}
		paused, err := in.paused(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, QueueInfo{Config: q.cfg, CreatedAt: at, Paused: paused})
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out, nil
}
