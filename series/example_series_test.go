package series_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

// Example creates a nightly series in a time zone, creates it again (which changes
// nothing), and pauses it.
func Example() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "reports"}); err != nil {
		panic(err)
	}
	c, err := series.New(d, series.Config{})
	if err != nil {
		panic(err)
	}
	nightly := series.Series{Queue: "reports", Name: "nightly-report", Cron: "30 2 * * *",
		TimeZone: "Europe/Paris", Payload: []byte("build")}
	first, err := c.Create(ctx, nightly)
	if err != nil {
		panic(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	fmt.Println("next run at", first.NextAt.In(paris).Format("15:04"))

	again, err := c.Create(ctx, nightly) // every process may create it at start
	if err != nil {
		panic(err)
	}
	fmt.Println("same occurrence:", again.NextID == first.NextID)

	if err := c.Pause(ctx, "reports", "nightly-report"); err != nil {
		panic(err)
	}
	info, err := c.Get(ctx, "reports", "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("paused:", info.Paused, "outstanding:", !info.NextAt.IsZero())
	// Output:
	// next run at 02:30
	// same occurrence: true
	// paused: true outstanding: false
}
