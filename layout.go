package shardq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardq/shardq/internal/defaults"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/lwt"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/shardqtype"
)

// ChangeLayout changes queue name's layout from a time at least LayoutLead ahead, at a
// boundary of both the old and the new buckets, and returns it. No task is lost:
// consumers read every layout that may still hold tasks (tasks written under an old one
// stay there, due next week or in flight) until a full read of it finds none, and stop
// reading it then.
//
// While a change has yet to take effect, or MaxLiveLayouts are live, it returns a
// *LayoutChangingError (matching ErrLayoutChanging) naming when to try again. Asking for
// the layout in force, or about to be, changes nothing and returns that one. It returns
// ErrQueueNotFound when no such queue exists, and a *ValidationError for a layout
// QueueConfig would refuse, or one whose lap cannot hold the queue's DefaultTimeout.
func ChangeLayout(ctx context.Context, d *shardqtype.Driver, name string, cfg LayoutConfig) (LayoutChange, error) {
	tables := sessionstate.For(d, nil).Store
	queues := tables.Queues()
	q, err := loadQueue(ctx, queues, name)
	if err != nil {
		return LayoutChange{}, err
	}
	st, err := queues.Status(ctx, name, true)
	if err != nil {
		return LayoutChange{}, fmt.Errorf("shardq: reading the layouts of queue %q: %w", name, err)
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return LayoutChange{}, err
	}
	now, _, err := tables.Now(ctx)
	if err != nil {
		return LayoutChange{}, fmt.Errorf("shardq: changing the layout of queue %q: %w", name, err)
	}
	next, err := nextLayout(q, h, cfg, now)
	if err != nil {
		return LayoutChange{}, err
	}
	if next.Layout.Generation == h.Last().Layout.Generation {
		return LayoutChange{Generation: next.Layout.Generation, From: h.Last().From}, nil
	}
	from, to := st.Layouts, h
	to.Gens = append(to.Gens[:len(to.Gens):len(to.Gens)], next)
	to.Version++
	applied, err := lwt.Apply(ctx, func(ctx context.Context) (bool, error) {
		return queues.SetLayouts(ctx, name, from, to.Encode())
	}, func(rctx context.Context, cause error) (bool, error) {
		return settleLayouts(rctx, queues, name, from, to, cause)
	})
	switch {
	case err != nil:
		return LayoutChange{}, fmt.Errorf("shardq: changing the layout of queue %q: %w", name, err)
	case !applied:
		return LayoutChange{}, &LayoutChangingError{Queue: name, Reason: "another change was made meanwhile", RetryAt: now}
	}
	return LayoutChange{Generation: next.Layout.Generation, From: next.From}, nil
}

// nextLayout returns the generation cfg asks for after h, taking effect at least
// LayoutLead after now, or h's last generation when cfg asks for it.
func nextLayout(q QueueConfig, h layouts.History, cfg LayoutConfig, now time.Time) (layouts.Gen, error) {
	last := h.Last()
	cur := last.Layout
	want := q
	want.ShardCount, want.BucketCount, want.BucketDuration = cfg.ShardCount, cfg.BucketCount, cfg.BucketDuration
	if want.ShardCount == 0 {
		want.ShardCount = cur.ShardCount
	}
	if want.BucketCount == 0 {
		want.BucketCount = cur.BucketCount
	}
	if want.BucketDuration == 0 {
		want.BucketDuration = cur.BucketDuration
	}
	if err := want.Validate(); err != nil {
		// The fields LayoutConfig has are named as its; a DefaultTimeout the new lap cannot
		// hold stays the queue's.
		var ve *ValidationError
		if errors.As(err, &ve) && slices.Contains([]string{"QueueConfig.ShardCount", "QueueConfig.BucketCount", "QueueConfig.BucketDuration"}, ve.Field) {
			return layouts.Gen{}, defaults.Invalid("LayoutConfig."+strings.TrimPrefix(ve.Field, "QueueConfig."), "%s", ve.Reason)
		}
		return layouts.Gen{}, err
	}
	if want.ShardCount == cur.ShardCount && want.BucketCount == cur.BucketCount && want.BucketDuration == cur.BucketDuration {
		return last, nil
	}
	if last.From.After(now) {
		return layouts.Gen{}, &LayoutChangingError{Queue: q.Name, Reason: fmt.Sprintf("generation %d takes effect at %s", cur.Generation, last.From.UTC().Format(time.RFC3339)), RetryAt: last.From}
	}
	if live := h.Live(); len(live) >= MaxLiveLayouts {
		at, _ := h.Sealed(h.Drained, layouts.SealAfter)
		return layouts.Gen{}, &LayoutChangingError{Queue: q.Name, Reason: fmt.Sprintf("%d layouts are live; generation %d is draining", len(live), h.Drained), RetryAt: at}
	}
	align := lcm(cur.BucketDuration.Milliseconds(), want.BucketDuration.Milliseconds())
	if time.Duration(align)*time.Millisecond > MaxLayoutAlign {
		return layouts.Gen{}, defaults.Invalid("LayoutConfig.BucketDuration", "%v and the current %v share a bucket boundary only every %v, more than %v",
			want.BucketDuration, cur.BucketDuration, time.Duration(align)*time.Millisecond, MaxLayoutAlign)
	}
	earliest := now.Add(LayoutLead).UnixMilli()
	at := (earliest + align - 1) / align * align // earliest is positive: no floor needed
	l := want.Layout()
	l.Generation = cur.Generation + 1
	return layouts.Gen{Layout: l, From: time.UnixMilli(at)}, nil
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// settleLayouts settles a change of queue name's layouts from from to to whose outcome
// is unknown. A straggler could still apply it later, and so make a change take effect
// sooner after it is known than LayoutLead: so when the history is still from, it is
// voided by rewriting it as it is under the next version, which fails the straggler's
// condition.
func settleLayouts(ctx context.Context, queues store.Queues, name, from string, to layouts.History, cause error) (bool, error) {
	unknown := func(err error) (bool, error) {
		return false, fmt.Errorf("%w: %w (settling it: %w)", lwt.ErrOutcomeUnknown, cause, err)
	}
	st, err := queues.Status(ctx, name, true)
	switch {
	case err != nil:
		return unknown(err)
	case st.Layouts == to.Encode():
		return true, nil
	case st.Layouts != from:
		return false, fmt.Errorf("%w (another change was stored meanwhile)", cause)
	}
	void := to
	void.Gens = void.Gens[:len(void.Gens)-1]
	void.Version++ // past to's, so neither straggler nor void can be taken for the other
	applied, err := queues.SetLayouts(ctx, name, from, void.Encode())
	switch {
	case err != nil:
		return unknown(err)
	case !applied:
		// The straggler got in first, or another change did: either way, read again.
		st, err = queues.Status(ctx, name, true)
		if err != nil {
			return unknown(err)
		}
		if st.Layouts == to.Encode() {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w (not stored when read back)", cause)
}

// QueueLayouts returns queue name's layouts, oldest first, each with when it takes
// effect (zero for the first) and whether consumers still read it.
func QueueLayouts(ctx context.Context, d *shardqtype.Driver, name string) ([]LayoutInfo, error) {
	queues := sessionstate.For(d, nil).Store.Queues()
	q, err := loadQueue(ctx, queues, name)
	if err != nil {
		return nil, err
	}
	st, err := queues.Status(ctx, name, false)
	if err != nil {
		return nil, fmt.Errorf("shardq: reading the layouts of queue %q: %w", name, err)
	}
	h, err := layouts.Decode(q.Layout(), st.Layouts)
	if err != nil {
		return nil, err
	}
	out := make([]LayoutInfo, len(h.Gens))
	for i, g := range h.Gens {
		out[i] = LayoutInfo{Layout: g.Layout, From: g.From, Drained: i < h.Drained}
	}
	return out, nil
}
