package worker_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/cqlcluster"
)

// children are worker processes of a test: this test binary run again with -test.run
// naming the process's test function, which reads its settings from env, prints "ready"
// once its worker runs and stops when its standard input closes.
type children struct {
	t      *testing.T
	cmds   []*exec.Cmd
	stdins []io.WriteCloser
	// lines carries every other line the children print, the words of each.
	lines chan []string
}

// spawn starts n children running test run, waits until each said "ready", and kills
// any still running when t ends.
func spawn(t *testing.T, run string, n int, env ...string) *children {
	t.Helper()
	c := &children{t: t, lines: make(chan []string, 4096)}
	ready := make(chan struct{}, n)
	t.Cleanup(func() {
		for _, cmd := range c.cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), env...), cqlcluster.HostsEnv+"="+strings.Join(cassandratest.Hosts(t), ","))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		c.cmds, c.stdins = append(c.cmds, cmd), append(c.stdins, stdin)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 1 && f[0] == "ready" {
					ready <- struct{}{}
				} else if len(f) > 0 {
					c.lines <- f
				}
			}
		}()
	}
	for range n {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "a worker process did not start in 30s")
		}
	}
	return c
}

// tell writes line to every child's standard input.
func (c *children) tell(line string) {
	c.t.Helper()
	for _, in := range c.stdins {
		_, err := fmt.Fprintln(in, line)
		require.NoError(c.t, err)
	}
}

// stop closes the children's standard input and waits for them to end well.
func (c *children) stop() {
	c.t.Helper()
	for _, in := range c.stdins {
		require.NoError(c.t, in.Close())
	}
	for _, cmd := range c.cmds {
		require.NoError(c.t, cmd.Wait())
	}
	c.cmds = nil
}

// printer prints lines from several goroutines of a child process whole.
type printer struct{ mu sync.Mutex }

func (p *printer) println(a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Println(a...)
}
