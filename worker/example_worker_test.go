package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// Example runs a handler on a queue's tasks with a worker, and stops it gracefully.
func Example() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "thumbnails"}); err != nil {
		panic(err)
	}

	handled := make(chan string)
	w, err := worker.New(d, worker.Config{
		Queue:       "thumbnails",
		Concurrency: 4,
		Handler: worker.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
			handled <- string(t.Payload) // returning nil acks; an error retries with backoff
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	p, err := producer.New(d, producer.Config{})
	if err != nil {
		panic(err)
	}
	// A producer in the same process wakes idle workers at once.
	if _, err := p.ScheduleTask(ctx, producer.Task{Queue: "thumbnails", Payload: []byte("cat.jpg")}); err != nil {
		panic(err)
	}
	fmt.Println("handled", <-handled)

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil { // running handlers finish; their acks are flushed
		panic(err)
	}
	fmt.Println("acked", w.Stats().Acked)
	// Output:
	// handled cat.jpg
	// acked 1
}
