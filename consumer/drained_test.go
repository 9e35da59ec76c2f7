package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/layouts"
	"github.com/shardq/shardq/internal/testclock"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

// A consumer that last read its queue's first layout while a task there was coming due,
// and next reads the queue's history once another consumer has marked that layout drained,
// reads only the later layout's ring from then on. Its NextDue is that ring's: the time
// the first layout's plan saw, long past, made idle workers poll at once, for good.
func TestDrainedLayoutLeavesNoNextDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "drained", ShardCount: 1, BucketCount: 60,
		BucketDuration: time.Second, DefaultTimeout: 5 * time.Second})
	require.NoError(t, err)
	ch, err := shardq.ChangeLayout(ctx, cassandratest.Driver(s), q.Name, shardq.LayoutConfig{ShardCount: 2})
	require.NoError(t, err)
	clock := testclock.New(time.Now())
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Clock: clock})
	require.NoError(t, err)
	due := ch.From.Add(-2 * time.Second) // under the first layout
	id, err := p.ScheduleTask(ctx, producer.Task{Queue: q.Name, DueAt: due})
	require.NoError(t, err)

	// A reads the history on a session of its own, whose copy of it the other's drain
	// does not refresh.
	a, err := consumer.New(cassandratest.Driver(cassandratest.SessionFor(t, ks)), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	clock.Add(due.Add(-3 * time.Second).Sub(clock.Now()))
	got, err := a.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	readAt := time.Now() // A read the history before this
	require.Empty(t, got)
	require.WithinDuration(t, due, a.NextDue(), time.Millisecond, "the task coming due, as A saw it")

	require.NoError(t, p.Cancel(ctx, id, producer.CancelOptions{}))
	b, err := consumer.New(cassandratest.Driver(s), consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	clock.Add(ch.From.Add(layouts.SealAfter).Sub(clock.Now()))
	_, err = b.AcquireTasks(ctx, 10) // plans B's first look for a drained layout
	require.NoError(t, err)
	clock.Add(31 * time.Second) // past it, at most 30 s on
	_, err = b.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	hist, err := shardq.QueueLayouts(ctx, cassandratest.Driver(s), q.Name)
	require.NoError(t, err)
	require.True(t, hist[0].Drained, "B marked the first layout drained")

	// A reads the history again once its copy is SettingsRefresh old: a wait for a
	// period the code sets, not for something to happen.
	time.Sleep(time.Until(readAt.Add(shardqtype.SettingsRefresh)))
	got, err = a.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	if next := a.NextDue(); !next.IsZero() {
		require.True(t, next.After(clock.Now()), "NextDue %v is %v before now", next, clock.Now().Sub(next))
	}
}

// Maintain marks an empty, sealed layout drained when its look comes due (at most 30 s
// after the first call), and once it has been called AcquireTasks no longer looks: the
// look's reads of every partition of the old ring stay out of the takes.
func TestMaintainDrainsInsteadOfTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := cassandratest.Driver(cassandratest.SchemaSession(t))
	q, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "maintained", ShardCount: 1, BucketCount: 60,
		BucketDuration: time.Second})
	require.NoError(t, err)
	ch, err := shardq.ChangeLayout(ctx, d, q.Name, shardq.LayoutConfig{ShardCount: 2})
	require.NoError(t, err)
	clock := testclock.New(ch.From.Add(layouts.SealAfter))
	c, err := consumer.New(d, consumer.Config{Queue: q.Name, Clock: clock})
	require.NoError(t, err)
	drained := func() bool {
		hist, err := shardq.QueueLayouts(ctx, d, q.Name)
		require.NoError(t, err)
		return hist[0].Drained
	}

	require.NoError(t, c.Maintain(ctx)) // plans the first look
	clock.Add(31 * time.Second)
	_, err = c.AcquireTasks(ctx, 10)
	require.NoError(t, err)
	require.False(t, drained(), "AcquireTasks looked, though Maintain is called")
	require.NoError(t, c.Maintain(ctx))
	require.True(t, drained(), "Maintain marked the empty layout drained")
}
