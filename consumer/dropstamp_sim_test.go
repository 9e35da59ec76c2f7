package consumer_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/sessionstate"
	"github.com/shardq/shardq/shardqtype"
)

// trailing is a host clock 5 s behind true time.
type trailing struct{}

func (trailing) Now() time.Time { return time.Now().Add(-5 * time.Second) }

// A consumer on a host whose clock trails writes its markers at the cluster's stamp; when
// its swap is refused, it drops them at that stamp. Dropped at the host's own stamp, 5 s
// below, the markers outlived the drop and delivered the task again after it was taken
// and acked. The simulator found it with seed 12.
func TestSimRefusedSwapDropsMarkersAtTheirStamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		id := r.schedule()

		d := driver.New(nil)
		refuse := func(_ context.Context, q memstore.Request) (memstore.Fault, error) {
			if q.Op == "Leasing.Swap" {
				return memstore.Unavailable, nil
			}
			return memstore.None, nil
		}
		sessionstate.Bind(d, sessionstate.New(r.cluster.Client(memstore.ClientConfig{Clock: trailing{}.Now, Gate: refuse}), trailing{}, nil))
		var failed []string
		behind, err := consumer.New(d, consumer.Config{Queue: r.q.Name, Observer: shardqtype.ObserverFunc(func(_ context.Context, e shardqtype.Event) {
			if f, ok := e.(shardqtype.PartitionFailed); ok {
				failed = append(failed, f.Op)
			}
		})})
		require.NoError(t, err)
		got, err := behind.AcquireTasks(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, got)
		require.NotEmpty(t, failed, "the swap was refused")

		c := r.consumer(nil)
		held := r.leased(c)
		require.Equal(t, id, held.ID)
		require.NoError(t, c.AckTasks(ctx, held))
		time.Sleep(2 * r.q.DefaultTimeout) // past every marker's deadline
		require.Empty(t, r.acquireFor(c, 5*time.Second), "a marker of the refused swap delivered the acked task")
	})
}
