package shardq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/shardqgocql"
)

// SignupArgs is a kind of task: the welcome email of a new account.
type SignupArgs struct {
	Email string `json:"email"`
}

func (SignupArgs) Kind() string { return "signup" }

// ThumbnailArgs is another kind, whose tasks go to their own queue unless an insert says
// otherwise.
type ThumbnailArgs struct {
	Image string `json:"image"`
}

func (ThumbnailArgs) Kind() string { return "thumbnail" }

func (ThumbnailArgs) InsertOpts() shardq.InsertOpts {
	return shardq.InsertOpts{Queue: "media", Timeout: time.Minute}
}

// ExampleClient runs two kinds on two queues in one client, each queue with its own
// number of handlers.
func ExampleClient() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession() // any session bound to a keyspace
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}

	ran := make(chan struct{})
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, t *shardq.Task[SignupArgs]) error {
		fmt.Printf("welcome %s (queue %s)\n", t.Args.Email, t.Queue)
		ran <- struct{}{}
		return nil
	})
	shardq.AddWorkerFunc(workers, func(ctx context.Context, t *shardq.Task[ThumbnailArgs]) error {
		fmt.Printf("thumbnail of %s (queue %s)\n", t.Args.Image, t.Queue)
		ran <- struct{}{}
		return nil
	})
	client, err := shardq.NewClient(d, shardq.Config{
		Queues:  map[string]shardq.Queue{shardq.DefaultQueue: {Concurrency: 20}, "media": {Concurrency: 2}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil { // creates both queues
		panic(err)
	}
	defer client.Stop(ctx)

	if _, err := client.Insert(ctx, SignupArgs{Email: "alice@example.com"}, nil); err != nil {
		panic(err)
	}
	<-ran // the signup first: the thumbnail is inserted after it ran
	if _, err := client.Insert(ctx, ThumbnailArgs{Image: "cat.png"}, nil); err != nil {
		panic(err)
	}
	<-ran
	// Output:
	// welcome alice@example.com (queue default)
	// thumbnail of cat.png (queue media)
}

// ExampleClient_Insert inserts with options: a due time, a priority, a unique key and
// headers. An insert-only client (no Queues) serves producers.
func ExampleClient_Insert() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession()
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}
	if _, err := shardq.CreateQueue(ctx, d, shardq.QueueConfig{Name: shardq.DefaultQueue}); err != nil {
		panic(err)
	}
	client, err := shardq.NewClient(d, shardq.Config{})
	if err != nil {
		panic(err)
	}

	opts := &shardq.InsertOpts{
		DueAt:     time.Now().Add(24 * time.Hour),
		Priority:  7,
		UniqueKey: "reminder:alice",
		Headers:   map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	res, err := client.Insert(ctx, SignupArgs{Email: "alice@example.com"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Kind, res.Queue, res.Priority)

	_, err = client.Insert(ctx, SignupArgs{Email: "alice@example.com"}, opts)
	fmt.Println(err != nil) // the key is held: a *producer.DuplicateError

	many, err := client.InsertMany(ctx, []shardq.InsertManyParams{
		{Args: ThumbnailArgs{Image: "a.png"}, Opts: &shardq.InsertOpts{Queue: shardq.DefaultQueue}},
		{Args: SignupArgs{Email: "bob@example.com"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(many), many[0].Kind, many[1].Kind)
	// Output:
	// signup default 7
	// true
	// 2 thumbnail signup
}

// ExampleSnooze shows what a handler can return besides nil and an error: Snooze gives
// the task back for a while without counting the attempt, Cancel ends it for good in the
// dead letters.
func ExampleSnooze() {
	ctx := context.Background()
	session, done := cassandratest.ExampleSession()
	defer done()
	d := shardqgocql.New(session)
	if err := shardq.ApplySchema(ctx, d); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	finished := make(chan string, 2)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, t *shardq.Task[SignupArgs]) error {
		mu.Lock()
		seen[t.Args.Email]++
		n := seen[t.Args.Email]
		mu.Unlock()
		switch {
		case t.Args.Email == "":
			return shardq.Cancel(errors.New("no address: never retry"))
		case n == 1:
			fmt.Printf("%s: mail server busy, snoozing (attempt %d)\n", t.Args.Email, t.Attempt)
			return shardq.Snooze(100 * time.Millisecond)
		}
		fmt.Printf("%s: sent (attempt %d)\n", t.Args.Email, t.Attempt)
		finished <- t.Args.Email
		return nil
	})
	dead := make(chan shardq.DeadLettered, 1)
	client, err := shardq.NewClient(d, shardq.Config{
		Queues:  map[string]shardq.Queue{shardq.DefaultQueue: {}},
		Workers: workers,
		Observer: shardq.ObserverFunc(func(_ context.Context, e shardq.Event) {
			if l, ok := e.(shardq.DeadLettered); ok {
				dead <- l
			}
		}),
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	if _, err := client.Insert(ctx, SignupArgs{Email: "alice@example.com"}, nil); err != nil {
		panic(err)
	}
	<-finished
	if _, err := client.Insert(ctx, SignupArgs{}, nil); err != nil {
		panic(err)
	}
	l := <-dead
	fmt.Printf("dead after attempt %d: %v\n", l.Attempt, l.Err)
	// Output:
	// alice@example.com: mail server busy, snoozing (attempt 1)
	// alice@example.com: sent (attempt 1)
	// dead after attempt 1: shardq: cancelled by its handler: no address: never retry
}
