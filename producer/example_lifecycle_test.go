package producer_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

// Example_lifecycle schedules a task under a unique key, is refused a second one with the
// same key, moves the first, looks it up, and cancels it.
func Example_lifecycle() {
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
	p, err := producer.New(d, producer.Config{})
	if err != nil {
		panic(err)
	}

	task := producer.Task{Queue: "reports", Key: "monthly:2026-11", Payload: []byte("build"), DueAt: time.Now().Add(time.Hour)}
	id, err := p.ScheduleTask(ctx, task)
	if err != nil {
		panic(err)
	}
	_, err = p.ScheduleTask(ctx, task)
	var dup *producer.DuplicateError
	fmt.Println("second schedule refused:", errors.As(err, &dup) && dup.ExistingID == id)

	if err := p.Reschedule(ctx, id, producer.RescheduleOptions{DueAt: time.Now().Add(2 * time.Hour)}); err != nil {
		panic(err)
	}
	in, err := inspect.New(d, inspect.Config{}) // reads tasks back
	if err != nil {
		panic(err)
	}
	info, err := in.TaskByKey(ctx, "reports", "monthly:2026-11")
	if err != nil {
		panic(err)
	}
	fmt.Println(info.State, info.DueAt.After(time.Now().Add(90*time.Minute)))

	if err := p.Cancel(ctx, id, producer.CancelOptions{}); err != nil {
		panic(err)
	}
	_, err = in.Task(ctx, id)
	fmt.Println(errors.Is(err, shardqtype.ErrTaskNotFound))
	// Output:
	// second schedule refused: true
	// scheduled true
	// true
}
