package shardq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
)

// Example schedules a task, takes it as a consumer would, and acks it.
func Example() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)

	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardq.QueueConfig{Name: "emails"}); err != nil {
		panic(err)
	}

	p, err := producer.New(d, producer.Config{})
	if err != nil {
		panic(err)
	}
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: "emails", Payload: []byte("welcome alice"), Priority: 5})
	if err != nil {
		panic(err)
	}
	_, err = p.ScheduleTask(ctx, producer.Task{Queue: "emails", Payload: []byte("digest"), DueAt: time.Now().Add(time.Hour)})
	if err != nil {
		panic(err)
	}

	c, err := consumer.New(d, consumer.Config{Queue: "emails"})
	if err != nil {
		panic(err)
	}
	tasks, err := c.AcquireTasks(ctx, 10)
	if err != nil {
		panic(err)
	}
	for _, t := range tasks {
		fmt.Printf("%s (priority %d, attempt %d)\n", t.Payload, t.Priority, t.Attempt)
	}
	if err := c.AckTasks(ctx, tasks...); err != nil {
		panic(err)
	}
	// Output:
	// welcome alice (priority 5, attempt 1)
}
