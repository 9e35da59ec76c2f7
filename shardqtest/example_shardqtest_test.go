package shardqtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/producer"
	"github.com/shardq/shardq/shardqgocql"
	"github.com/shardq/shardq/shardqtest"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

// sendWelcome is a handler under test: it gives up on the last delivery.
var sendWelcome = worker.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
	if t.Attempt >= worker.DefaultMaxAttempts {
		return errors.New("mail server down for good")
	}
	fmt.Printf("to %s, attempt %d, lease ends in %v\n", t.Payload, t.Attempt, t.Timeout)
	return nil
})

// ExampleWork runs a handler on tasks built in memory: no cluster is needed.
func ExampleWork() {
	ctx := context.Background()
	task := shardqtest.NewTask("emails", []byte("alice@example.com"))
	fmt.Println(shardqtest.Work(ctx, sendWelcome, task)) // nil: a worker would ack it

	task.Attempt = worker.DefaultMaxAttempts // its last delivery
	fmt.Println(shardqtest.Work(ctx, sendWelcome, task))
	// Output:
	// to alice@example.com, attempt 1, lease ends in 30s
	// <nil>
	// mail server down for good
}

// ExampleRequireScheduled checks what code under test scheduled, on a real node.
func ExampleRequireScheduled() {
	ctx := context.Background()
	// In a test: session := shardqtest.Session(t).
	session, done := cassandratest.ExampleSession()
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardqtype.QueueConfig{Name: "emails"}); err != nil {
		panic(err)
	}

	// The code under test: sign-up schedules a welcome email and a reminder in a day.
	p, err := producer.New(d, producer.Config{})
	if err != nil {
		panic(err)
	}
	day := time.Now().Add(24 * time.Hour)
	_, err = p.ScheduleTasks(ctx, []producer.Task{
		{Queue: "emails", Key: "welcome:42", Payload: []byte("welcome")},
		{Queue: "emails", Key: "reminder:42", Payload: []byte("reminder"), DueAt: day, Priority: 3},
	})
	if err != nil {
		panic(err)
	}

	t := &testing.T{} // in a test, the test's own t
	welcome := shardqtest.RequireScheduled(ctx, t, d, "emails", shardqtest.Match{Key: "welcome:42"})
	fmt.Printf("%s: %s\n", welcome.State, welcome.Payload)

	tasks := shardqtest.RequireScheduledMany(ctx, t, d, "emails",
		shardqtest.Match{Payload: []byte("reminder"), DueAt: day},
		shardqtest.Match{Where: func(i *shardqtype.TaskInfo) bool { return i.Priority == 0 }},
	)
	fmt.Printf("%s at priority %d\n", tasks[0].Key, tasks[0].Priority)
	// Output:
	// scheduled: welcome
	// reminder:42 at priority 3
}

type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string { return "welcome" }

// ExampleNewClient tests code that inserts tasks and the workers that run them on a
// store held in memory: no cluster, and a clock the test moves.
func ExampleNewClient() {
	t := &testing.T{} // in a test function: its t
	welcomed := make(chan string, 1)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, task *shardq.Task[welcome]) error {
		welcomed <- task.Args.To
		return nil
	})
	c := shardqtest.NewClient(t, shardq.Config{Workers: workers, Queues: map[string]shardq.Queue{shardq.DefaultQueue: {}}})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Stop(ctx)

	// The code under test: sign-up welcomes at once, and again in a day.
	if _, err := c.Insert(ctx, welcome{To: "alice"}, nil); err != nil {
		panic(err)
	}
	if _, err := c.Insert(ctx, welcome{To: "alice, a day on"}, &shardq.InsertOpts{DueAt: c.Clock.Now().Add(24 * time.Hour)}); err != nil {
		panic(err)
	}
	fmt.Println("welcome", <-welcomed) // the second is a day away
	c.Clock.Advance(24 * time.Hour)
	fmt.Println("welcome", <-welcomed)
	// Output:
	// welcome alice
	// welcome alice, a day on
}
