package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
	"github.com/shardq/shardq/internal/memstore"
	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/storetest"
)

// Every scenario of storetest runs on a real node (store.Of on the gocql v1 adapter) and
// on a memstore Cluster, and asserts the same results on both: where they disagree, the
// real node's behaviour is the one memstore must follow. Each scenario's two runs sit
// side by side under its name, so that a disagreement reads as one failing pair.
func TestConformance(t *testing.T) {
	t.Parallel()
	cassandra := func(t *testing.T) store.Store { return store.Of(gocqlv1.New(cassandratest.SchemaSession(t))) }
	mem := func(t *testing.T) store.Store {
		c, err := memstore.New(memstore.Config{Now: time.Now})
		require.NoError(t, err)
		return c.Client(memstore.ClientConfig{Clock: time.Now})
	}
	for _, sc := range storetest.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("cassandra", func(t *testing.T) {
				t.Parallel()
				sc.Test(t, cassandra)
			})
			t.Run("memstore", func(t *testing.T) {
				t.Parallel()
				sc.Test(t, mem)
			})
		})
	}
}

// The helpers memstore's own tests share with the scenarios.
const key = storetest.Key

var (
	taskRow = storetest.TaskRow
	insert  = storetest.Insert
	holder  = storetest.Holder
)
