package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shardqtype"
)

// QueueInfo is a stored queue: its settings, when it was created, whether it is paused
// (shardq.PauseQueue), and its layouts when it changed them (shardq.ChangeLayout).
type QueueInfo struct {
	Config    shardqtype.QueueConfig
	CreatedAt time.Time
	Paused    bool
	// Layouts are the queue's layouts, oldest first, the first Config's; nil when it
	// never changed it.
	Layouts []shardqtype.LayoutInfo
}

// info is the QueueInfo of q with status st.
func info(q shardqtype.QueueConfig, st store.QueueStatus) (QueueInfo, error) {
	out := QueueInfo{Config: q, CreatedAt: st.CreatedAt, Paused: st.Paused}
	if st.Layouts == "" {
		return out, nil
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return QueueInfo{}, err
	}
	for i, g := range h.Gens {
		out.Layouts = append(out.Layouts, shardqtype.LayoutInfo{Layout: g.Layout, From: g.From, Drained: i < h.Drained})
	}
	return out, nil
}

// Queue reads one queue's settings and status, or returns an error matching
// shardqtype.ErrQueueNotFound.
func (in *Inspector) Queue(ctx context.Context, name string) (QueueInfo, error) {
	q, err := in.state.Queue(ctx, name)
	if err != nil {
		return QueueInfo{}, err
	}
	st, err := in.state.Store.Queues().Status(ctx, name, false)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return QueueInfo{}, fmt.Errorf("inspect: reading queue %q: %w", name, err)
	}
	return info(q, st)
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
		q, err := in.state.Queue(ctx, name)
		if err != nil {
			return nil, err
		}
		qi, err := info(q, st)
		if err != nil {
			return nil, err
		}
		out = append(out, qi)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out, nil
}
