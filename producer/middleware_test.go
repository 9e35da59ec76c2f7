package producer_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqtype"
)

type ctxKey struct{}

// Config.Middleware wraps ScheduleTask and ScheduleTasks alike: it sees the call's
// context, the tasks it passes on are the ones written (with the headers it added), the
// caller's tasks stay as they were, and it sees what the call returned.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	type call struct {
		ctx   any
		tasks int
		ids   []uuid.UUID
		err   error
	}
	var calls []call
	mw := func(next producer.ScheduleFunc) producer.ScheduleFunc {
		return func(ctx context.Context, tasks []producer.Task) ([]uuid.UUID, error) {
			tagged := slices.Clone(tasks)
			for i := range tagged {
				tagged[i].Headers = maps.Clone(tagged[i].Headers)
				if tagged[i].Headers == nil {
					tagged[i].Headers = map[string]string{}
				}
				tagged[i].Headers["by"] = "middleware"
			}
			ids, err := next(ctx, tagged)
			calls = append(calls, call{ctx.Value(ctxKey{}), len(tasks), ids, err})
			return ids, err
		}
	}
	p, err := producer.New(cassandratest.Driver(s), producer.Config{Middleware: mw})
	require.NoError(t, err)
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")

	own := producer.Task{Queue: "q", Headers: map[string]string{"tenant": "acme"}}
	one, err := p.ScheduleTask(ctx, own)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"tenant": "acme"}, own.Headers, "the caller's task is not changed")
	many, err := p.ScheduleTasks(ctx, []producer.Task{{Queue: "q"}, {Queue: "q"}})
	require.NoError(t, err)
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: "q", Priority: 99})
	require.ErrorIs(t, err, shardqtype.ErrInvalid)

	require.Len(t, calls, 3)
	require.Equal(t, call{"caller", 1, []uuid.UUID{one}, nil}, calls[0])
	require.Equal(t, call{"caller", 2, many, nil}, calls[1])
	require.True(t, errors.Is(calls[2].err, shardqtype.ErrInvalid), "the middleware sees the call's error")

	in, err := inspect.New(cassandratest.Driver(s), inspect.Config{})
	require.NoError(t, err)
	info, err := in.Task(ctx, one)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"tenant": "acme", "by": "middleware"}, info.Headers)
	info, err = in.Task(ctx, many[1])
	require.NoError(t, err)
	require.Equal(t, map[string]string{"by": "middleware"}, info.Headers)
}
