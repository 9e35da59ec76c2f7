package shardqgocqlv2_test

import (
	"context"
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/shardqgocqlv2"
)

// WelcomeArgs is a kind of task: the welcome email of a new account.
type WelcomeArgs struct {
	Email string `json:"email"`
}

func (WelcomeArgs) Kind() string { return "welcome" }

// ExampleNew starts a service on the v2 driver: a session with the recommended settings,
// shardq's schema, and a client that runs one kind of task.
func ExampleNew() {
	ctx := context.Background()
	hosts, keyspace, done := cassandratest.ExampleKeyspace() // your cluster's nodes and keyspace
	defer done()

	cluster := shardqgocqlv2.RecommendedCluster(gocql.NewCluster(hosts...))
	cluster.Keyspace = keyspace
	session, err := cluster.CreateSession()
	if err != nil {
		panic(err)
	}
	defer session.Close()
	d := shardqgocqlv2.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}

	sent := make(chan struct{})
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, t *shardq.Task[WelcomeArgs]) error {
		fmt.Println("welcome", t.Args.Email)
		sent <- struct{}{}
		return nil
	})
	client, err := shardq.NewClient(d, shardq.Config{
		Queues:  map[string]shardq.Queue{shardq.DefaultQueue: {}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil { // creates the queue
		panic(err)
	}
	defer client.Stop(ctx)

	if _, err := client.Insert(ctx, WelcomeArgs{Email: "alice@example.com"}, nil); err != nil {
		panic(err)
	}
	<-sent
	// Output: welcome alice@example.com
}
