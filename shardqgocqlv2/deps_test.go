package shardqgocqlv2_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A program on v2 links no part of github.com/gocql/gocql through shardq, its recipes or
// this adapter: the v1 adapter and the test helpers are the only parts of shardq that
// import it. The packages are listed as a service building this module would list them
// (GOWORK=off), so go is needed on PATH.
func TestNoV1Linked(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "listing the packages linked needs the go command")
	pkgs := []string{
		"github.com/shardq/shardq",
		"github.com/shardq/shardq/shardqgocqlv2",
		"github.com/shardq/shardq/producer",
		"github.com/shardq/shardq/consumer",
		"github.com/shardq/shardq/worker",
		"github.com/shardq/shardq/lock",
		"github.com/shardq/shardq/series",
		"github.com/shardq/shardq/inspect",
	}
	cmd := exec.CommandContext(t.Context(), goBin, append([]string{"list", "-deps"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	listed := strings.Fields(string(out))
	require.Contains(t, listed, "github.com/apache/cassandra-gocql-driver/v2", "the listing is of this module's build")
	for _, p := range listed {
		if p == "github.com/gocql/gocql" || strings.HasPrefix(p, "github.com/gocql/gocql/") {
			t.Errorf("%s is linked", p)
		}
	}
}
