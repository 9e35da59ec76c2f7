package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/inspect"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtype"
)

// Example looks at a queue as an operator does: what it holds, what is due next, one task,
// and the dead letters, which a producer then replays.
func Example() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "emails", ShardCount: 2}); err != nil {
		panic(err)
	}
	p, err := producer.New(d, producer.Config{})
	if err != nil {
		panic(err)
	}
	ids, err := p.ScheduleTasks(ctx, []producer.Task{
		{Queue: "emails", Payload: []byte("newsletter"), Priority: 1},
		{Queue: "emails", Payload: []byte("password reset"), Priority: 9, Key: "reset:42"},
	})
	if err != nil {
		panic(err)
	}

	in, err := inspect.New(d, inspect.Config{})
	if err != nil {
		panic(err)
	}
	st, err := in.Stats(ctx, "emails", inspect.StatsOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("due:", st.Total.Due, "dead letters:", st.DeadLetters)
	next, err := in.Peek(ctx, "emails", 10)
	if err != nil {
		panic(err)
	}
	for _, t := range next.Tasks {
		fmt.Printf("next: %s (priority %d, %s)\n", t.Payload, t.Priority, t.State)
	}
	reset, err := in.TaskByKey(ctx, "emails", "reset:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("reset:42 is", reset.ID == ids[1], reset.State)

	// A consumer gives up on the newsletter.
	c, err := consumer.New(d, consumer.Config{Queue: "emails"})
	if err != nil {
		panic(err)
	}
	var taken []*consumer.Task
	for deadline := time.Now().Add(10 * time.Second); len(taken) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			panic("the tasks were not delivered")
		}
		more, err := c.AcquireTasks(ctx, 2-len(taken))
		if err != nil {
			panic(err)
		}
		taken = append(taken, more...)
	}
	for _, t := range taken {
		if t.ID == ids[0] {
			err = c.DeadLetter(ctx, t, errors.New("smtp: 550 mailbox unavailable"))
		} else {
			err = c.AckTasks(ctx, t)
		}
		if err != nil {
			panic(err)
		}
	}
	letters, err := in.DeadLetters(ctx, "emails", inspect.DeadLetterQuery{})
	if err != nil {
		panic(err)
	}
	for _, d := range letters {
		fmt.Printf("dead: %s after %d attempt(s): %s\n", d.Payload, d.Attempt, d.LastError)
		if _, err := p.ReplayDeadLetter(ctx, "emails", d.DeadLetterID); err != nil {
			panic(err)
		}
	}
	n, err := in.CountDeadLetters(ctx, "emails")
	if err != nil {
		panic(err)
	}
	newsletter, err := in.Task(ctx, ids[0])
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters left:", n, "newsletter:", newsletter.State)
	// Output:
	// due: 2 dead letters: 0
	// next: password reset (priority 9, scheduled)
	// next: newsletter (priority 1, scheduled)
	// reset:42 is true scheduled
	// dead: newsletter after 1 attempt(s): smtp: 550 mailbox unavailable
	// dead letters left: 0 newsletter: scheduled
}
