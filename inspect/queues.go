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

// Queue reads one queue's settings and status, or returns an error matching
// shardq.ErrQueueNotFound.
func (in *Inspector) Queue(ctx context.Context, name string) (QueueInfo, error) {
	q, err := in.queue(ctx, name)
	if err != nil {
		return QueueInfo{}, err
	}
	st, err := in.state.Store.Queues().Status(ctx, name, false)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return QueueInfo{}, fmt.Errorf("inspect: reading queue %q: %w", name, err)
	}
	return QueueInfo{Config: q.cfg, CreatedAt: st.CreatedAt, Paused: st.Paused}, nil
}

// Queues reads every stored queue, by name. The queues table is small (one row a
// queue): it is read whole, in pages, and each queue's settings as Queue reads them.
func (in *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	statuses, err := in.state.Store.Queues().Statuses(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: listing queues: %w", err)
	}
	out := make([]QueueInfo, 0, len(statuses))
	for name, st := range statuses {
		q, err := in.queue(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, QueueInfo{Config: q.cfg, CreatedAt: st.CreatedAt, Paused: st.Paused})
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out, nil
}
