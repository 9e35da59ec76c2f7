package series_test

import (
	"bufio"
	"context"
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
	"github.com/shardq/shardq/consumer"
	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
	"github.com/shardq/shardq/series"
	"github.com/shardq/shardq/shardqtype"
	"github.com/shardq/shardq/worker"
)

const (
	workerKeyspaceEnv = "SHARDQ_TEST_SERIES_KEYSPACE"
	workerQueueEnv    = "SHARDQ_TEST_SERIES_QUEUE"
)

// TestSeriesWorkerProcess is a worker process of TestSeriesAcrossKilledProcess: two
// default workers of the queue, printing "start <task> <due ns> <token> <now ns>" as a
// handler starts and "done <task> <now ns>" as it returns. Once a line "hold" comes on
// its standard input, the next handler to start prints "held <task>" after its start
// line and never returns, so the task cannot be acked before the process is killed. It
// stops when its standard input closes. Run on its own it has nothing to do and returns.
func TestSeriesWorkerProcess(t *testing.T) {
	ks := os.Getenv(workerKeyspaceEnv)
	if ks == "" {
		return
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	session := cassandratest.SessionFor(t, ks)
	ctx := context.Background()
	hold := make(chan struct{}, 1)
	var workers []*worker.Worker
	for range 2 {
		w, err := worker.New(cassandratest.Driver(session), worker.Config{Queue: os.Getenv(workerQueueEnv),
			Handler: worker.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
				say("start %s %d %d %d", task.ID, task.DueAt.UnixNano(), task.Token, time.Now().UnixNano())
				select {
				case <-hold:
					say("held %s", task.ID)
					<-ctx.Done() // the process is killed before the lease ends
					return ctx.Err()
				default:
				}
				say("done %s %d", task.ID, time.Now().UnixNano())
				return nil
			})})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		workers = append(workers, w)
	}
	say("ready")
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		if sc.Text() == "hold" {
			hold <- struct{}{}
		}
	}
	for _, w := range workers {
		require.NoError(t, w.Stop(ctx))
	}
}

type delivery struct {
	due        time.Time
	starts     []time.Time
	lastDone   time.Time
	deliveries int
}

// A series every second, run by four workers in two processes, one of which is killed
// (SIGKILL) and started again during the run: over more than 50 occurrences, every
// occurrence the series scheduled is delivered, none twice at one time in the series,
// and an occurrence starts only after the one before it finished.
func TestSeriesAcrossKilledProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ks := cassandratest.SchemaKeyspace(t)
	s := cassandratest.SessionFor(t, ks)
	q, err := shardq.CreateQueue(ctx, cassandratest.Driver(s), shardqtype.QueueConfig{Name: "q" + strings.ReplaceAll(uuid.NewString()[:8], "-", ""),
		DefaultTimeout: 2 * time.Second})
	require.NoError(t, err)
	c, err := series.New(cassandratest.Driver(s), series.Config{})
	require.NoError(t, err)

	type line struct {
		from int // the process that printed it, numbered from 1 in start order
		text string
	}
	lines := make(chan line, 1024)
	started := 0
	type proc struct {
		n     int
		cmd   *exec.Cmd
		stdin io.WriteCloser
		eof   chan struct{} // closed once its output is read to the end
	}
	start := func() proc {
		started++
		n := started
		child := exec.Command(os.Args[0], "-test.run=^TestSeriesWorkerProcess$", "-test.count=1")
		child.Env = append(os.Environ(), workerKeyspaceEnv+"="+ks, workerQueueEnv+"="+q.Name,
			cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(t), ","))
		stdin, err := child.StdinPipe()
		require.NoError(t, err)
		stdout, err := child.StdoutPipe()
		require.NoError(t, err)
		child.Stderr = os.Stderr
		require.NoError(t, child.Start())
		ready, eof := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(eof)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				switch text := sc.Text(); {
				case text == "ready":
					close(ready)
				case strings.HasPrefix(text, "start ") || strings.HasPrefix(text, "done ") || strings.HasPrefix(text, "held "):
					lines <- line{n, text}
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "a worker process did not start in 30s")
		}
		return proc{n, child, stdin, eof}
	}
	a, b := start(), start()

	in, err := c.Create(ctx, series.Series{Queue: q.Name, Name: "every-second", Every: time.Second})
	require.NoError(t, err)
	anchor := in.NextAt

	seen := map[uuid.UUID]*delivery{}
	var held uuid.UUID // the occurrence process a held when it was killed
	holding := false
	deadline := time.Now().Add(3 * time.Minute)
	// Past 55 occurrences, until a held one was delivered again: process a may start none
	// for a while once told to hold.
	for len(seen) < 55 || held == uuid.Nil || seen[held].deliveries < 2 {
		require.True(t, time.Now().Before(deadline), "after %d occurrences, held %v", len(seen), held)
		var l line
		select {
		case l = <-lines:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no occurrence started for 30s", "after %d occurrences", len(seen))
		}
		if id, ok := strings.CutPrefix(l.text, "held "); ok {
			// Killed in the handler of an occurrence, which never returns, so before its
			// ack: the occurrence is redelivered after its timeout, and the series waits
			// for it.
			require.Equal(t, a.n, l.from, "only process a was told to hold")
			held, err = uuid.Parse(id)
			require.NoError(t, err)
			require.NoError(t, a.cmd.Process.Kill())
			<-a.eof
			_ = a.cmd.Wait()
			a = start()
			continue
		}
		require.NoError(t, record(seen, l.text))
		if len(seen) >= 15 && !holding {
			holding = true
			_, err := io.WriteString(a.stdin, "hold\n")
			require.NoError(t, err)
		}
	}
	for _, p := range []proc{a, b} {
		require.NoError(t, p.stdin.Close())
		<-p.eof
		require.NoError(t, p.cmd.Wait())
	}
	close(lines)
	for l := range lines {
		require.NoError(t, record(seen, l.text))
	}

	final, err := c.Get(ctx, q.Name, "every-second")
	require.NoError(t, err)
	outstanding := 0
	if final.NextID != uuid.Nil && seen[final.NextID] == nil {
		outstanding = 1
	}
	require.Equal(t, int(final.Occurrences), len(seen)+outstanding,
		"every occurrence the series scheduled was delivered (one may still be pending)")

	occurrences := make([]*delivery, 0, len(seen))
	redelivered := 0
	for _, d := range seen {
		occurrences = append(occurrences, d)
		redelivered += d.deliveries - 1
		require.Zero(t, d.due.Sub(anchor)%time.Second, "an occurrence off the series' one-second grid")
	}
	slices.SortFunc(occurrences, func(x, y *delivery) int { return x.due.Compare(y.due) })
	for i := 1; i < len(occurrences); i++ {
		prev, cur := occurrences[i-1], occurrences[i]
		require.True(t, cur.due.After(prev.due), "two occurrences at %v", cur.due)
		require.False(t, prev.lastDone.IsZero(), "the occurrence at %v never finished, yet the next was scheduled", prev.due)
		require.True(t, cur.starts[0].After(prev.lastDone),
			"the occurrence at %v started before the one at %v finished: two were outstanding", cur.due, prev.due)
	}
	t.Logf("%d occurrences over %v, %d redelivered after the kill", len(occurrences),
		occurrences[len(occurrences)-1].due.Sub(occurrences[0].due), redelivered)
	require.NotEqual(t, uuid.Nil, held, "process a was killed holding an occurrence")
	require.NotNil(t, seen[held])
	require.Equal(t, 2, seen[held].deliveries, "the occurrence killed in its handler was delivered again, once")
	require.Equal(t, 1, redelivered, "only the occurrence killed in its handler was delivered twice")
}

// record notes a line of a worker process in seen.
func record(seen map[uuid.UUID]*delivery, line string) error {
	f := strings.Fields(line)
	if len(f) < 3 {
		return fmt.Errorf("unexpected line from a worker process: %q", line)
	}
	id, err := uuid.Parse(f[1])
	if err != nil {
		return err
	}
	var due, at int64
	switch {
	case f[0] == "start" && len(f) == 5:
		if _, err := fmt.Sscan(f[2]+" "+f[4], &due, &at); err != nil {
			return err
		}
		d := seen[id]
		if d == nil {
			d = &delivery{due: time.Unix(0, due)}
			seen[id] = d
		}
		d.starts = append(d.starts, time.Unix(0, at))
		d.deliveries++
	case f[0] == "done" && seen[id] != nil:
		if _, err := fmt.Sscan(f[2], &at); err != nil {
			return err
		}
		seen[id].lastDone = time.Unix(0, at)
	default:
		return fmt.Errorf("unexpected line from a worker process: %q", line)
	}
	return nil
}
