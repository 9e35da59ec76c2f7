package shardq_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
)

const clientKeyspaceEnv = "SHARDQ_TEST_CLIENT_KEYSPACE"

// jobArgs is the kind the client processes run: a slow job outlives its first lease.
type jobArgs struct {
	Slow bool `json:"slow"`
}

func (jobArgs) Kind() string { return "job" }

// leaseTimeout is each job's lease: a slow job's first run outlasts it.
const leaseTimeout = time.Second

// TestClientProcess is the client process of TestClientsInTwoProcesses: a client working
// the default queue, which prints a line for each run its handler made (the task, its
// attempt and fencing token, when the run began and ended, the lease's deadline, and
// whether it ended in time). It stops when its standard input closes. Run on its own it
// has nothing to do and returns.
func TestClientProcess(t *testing.T) {
	ks := os.Getenv(clientKeyspaceEnv)
	if ks == "" {
		return
	}
	out := make(chan string, 64)
	workers := shardq.NewWorkers()
	shardq.AddWorkerFunc(workers, func(ctx context.Context, task *shardq.Task[jobArgs]) error {
		began := time.Now()
		var err error
		if task.Args.Slow && task.Attempt == 1 {
			select { // the lease ends first, and ends ctx
			case <-time.After(2 * leaseTimeout):
				err = errors.New("outlived the lease")
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		out <- fmt.Sprintf("run %s %d %d %d %d %d %t", task.ID, task.Attempt, task.Token, began.UnixNano(),
			time.Now().UnixNano(), task.Deadline.UnixNano(), err == nil)
		return err
	})
	c, err := shardq.NewClient(cassandratest.Driver(cassandratest.SessionFor(t, ks)), shardq.Config{Workers: workers,
		Queues: map[string]shardq.Queue{shardq.DefaultQueue: {Concurrency: 16}}})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	for {
		select {
		case line := <-out:
			fmt.Println(line)
		case <-stop:
			require.NoError(t, c.Stop(ctx))
			return
		}
	}
}

// run is one handler run, as a client process reported it.
type run struct {
	id                     uuid.UUID
	attempt                int
	token                  int64
	began, ended, deadline time.Time
	inTime                 bool
}

// Two client processes work one queue; a tenth of the tasks outlive their first lease and
// run again. No task runs twice at once: each run began after the lease of the run before
// had ended and that run had returned, and every task ran to its end. (A run that ended
// in time but whose ack came after its lease's end may run again, after it: at least once.)
func TestClientsInTwoProcesses(t *testing.T) {
	t.Parallel()
	const tasks = 150
	s := cassandratest.SchemaSession(t)
	ks := s.Query("").Keyspace()
	ctx := context.Background()
	_, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardq.QueueConfig{Name: shardq.DefaultQueue})
	require.NoError(t, err)

	runs := make(chan run, 1024)
	var children sync.WaitGroup
	var stdins []io.Closer
	for range 2 {
		child := exec.Command(os.Args[0], "-test.run=^TestClientProcess$", "-test.count=1")
		child.Env = append(os.Environ(), clientKeyspaceEnv+"="+ks, cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(t), ","))
		stdin, err := child.StdinPipe()
		require.NoError(t, err)
		stdout, err := child.StdoutPipe()
		require.NoError(t, err)
		child.Stderr = os.Stderr
		require.NoError(t, child.Start())
		stdins = append(stdins, stdin)
		children.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if r, ok := parseRun(t, sc.Text()); ok {
					runs <- r
				}
			}
			require.NoError(t, child.Wait())
		})
	}

	c, err := shardq.NewClient(cassandratest.Driver(s), shardq.Config{})
	require.NoError(t, err)
	params := make([]shardq.InsertManyParams, tasks)
	for i := range params {
		params[i] = shardq.InsertManyParams{Args: jobArgs{Slow: i%10 == 0}, Opts: &shardq.InsertOpts{Timeout: leaseTimeout}}
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)

	byTask := map[uuid.UUID][]run{}
	done := map[uuid.UUID]bool{}
	deadline := time.After(2 * time.Minute)
	for len(done) < tasks {
		select {
		case r := <-runs:
			byTask[r.id] = append(byTask[r.id], r)
			if r.inTime {
				done[r.id] = true
			}
		case <-deadline:
			t.Fatalf("%d of %d tasks ran to their end within 2 minutes", len(done), tasks)
		}
	}
	for _, in := range stdins {
		require.NoError(t, in.Close())
	}
	children.Wait()
	close(runs)
	for r := range runs {
		byTask[r.id] = append(byTask[r.id], r)
	}

	require.Equal(t, tasks, len(byTask), "every task ran")
	again, twice := 0, 0
	for id, rs := range byTask {
		slices.SortFunc(rs, func(a, b run) int { return int(a.token - b.token) })
		inTime := 0
		for i, r := range rs {
			if r.inTime {
				inTime++
			}
			if i == 0 {
				continue
			}
			prev := rs[i-1]
			// Both processes share this host's clock, and their cluster clocks differ by
			// their measured offsets only: a few milliseconds.
			require.False(t, r.began.Before(prev.deadline.Add(-50*time.Millisecond)),
				"task %s: run %d began at %v, before the lease of run %d ended at %v", id, r.token, r.began, prev.token, prev.deadline)
			require.False(t, r.began.Before(prev.ended.Add(-100*time.Millisecond)),
				"task %s: run %d began at %v while run %d ran until %v", id, r.token, r.began, prev.token, prev.ended)
			again++
		}
		require.GreaterOrEqual(t, inTime, 1, "task %s ran to its end: %+v", id, rs)
		if inTime > 1 {
			twice++
		}
	}
	require.Positive(t, again, "tasks ran again") // a slow task whose lease ended before a handler was free did not run first
	t.Logf("%d runs after the first, %d tasks ran to their end more than once (acked after their lease)", again, twice)
}

func parseRun(t *testing.T, line string) (run, bool) {
	var r run
	var id string
	var began, ended, deadline int64
	if _, err := fmt.Sscanf(line, "run %s %d %d %d %d %d %t", &id, &r.attempt, &r.token, &began, &ended, &deadline, &r.inTime); err != nil {
		return run{}, false
	}
	var err error
	r.id, err = uuid.Parse(id)
	require.NoError(t, err)
	r.began, r.ended, r.deadline = time.Unix(0, began), time.Unix(0, ended), time.Unix(0, deadline)
	return r, true
}
