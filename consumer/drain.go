package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/random"
)

// drainEvery is how often a consumer looks whether the oldest of its queue's live
// layouts can be marked drained (layouts.Drain): a read of every partition of its ring,
// once sealed. Consumers look at random offsets, so a few look per interval between them.
// A look that finds tasks left (due next week, say) doubles the wait, up to drainAtMost,
// so a ring holding far-future tasks costs little to keep.
const (
	drainEvery  = 30 * time.Second
	drainAtMost = 16 * time.Minute
	// maintainedFor is how long after a Maintain call AcquireTasks leaves the looks to
	// Maintain's caller.
	maintainedFor = 2 * drainEvery
)

// drainer marks layouts drained for one Consumer.
type drainer struct {
	mu   sync.Mutex
	next time.Time     // when to look next; zero before the first look is planned
	wait time.Duration // from one look to the next
}

// maybe looks whether h's oldest live layout can be marked drained, when it is time to,
// and returns the look's error; a look that failed is made again at the next.
func (d *drainer) maybe(ctx context.Context, c *Consumer, h layouts.History) error {
	if h.Drained == len(h.Gens)-1 {
		return nil
	}
	now := c.cfg.Clock.Now()
	d.mu.Lock()
	if d.next.IsZero() {
		d.next = now.Add(time.Duration(random.N(int(drainEvery/time.Millisecond))) * time.Millisecond)
	}
	due := !now.Before(d.next)
	if due {
		d.wait = max(d.wait, drainEvery)
		d.next = now.Add(d.wait)
	}
	d.mu.Unlock()
	if !due {
		return nil
	}
	looked, drained, err := layouts.Drain(ctx, c.state.Store, h, now, c.cfg.PartitionsInFlight)
	if drained {
		c.log.InfoContext(ctx, "an old layout is drained: it is read no more", "queue", c.q.Name, "generation", h.Drained)
	}
	d.mu.Lock()
	if looked && !drained && err == nil {
		d.wait = min(2*d.wait, drainAtMost)
	} else {
		d.wait = drainEvery
	}
	d.mu.Unlock()
	return err
}
