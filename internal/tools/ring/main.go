// Command ring prints each node's view of the ring, read over CQL: the node itself from
// system.local, and every peer from system.peers_v2 with its gossip state from
// system_views.gossip_info. It exits non-zero unless every node sees every other as up
// and NORMAL ("UN"): NORMAL in gossip, and known in its current generation, so a node
// that restarted counts only once every other has heard from it since. scripts/cassandra
// start, restart and status run it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// view is what one node knows of the cluster.
type view struct {
	peers      []string
	status     map[string]string // gossip status by address
	generation map[string]int    // gossip generation by address
}

func main() {
	hosts := flag.String("hosts", "127.0.0.1", "comma-separated node addresses")
	flag.Parse()
	addrs := strings.Split(*hosts, ",")
	views := map[string]*view{}
	ok := true
	for _, addr := range addrs {
		v, err := read(addr)
		if err != nil {
			fmt.Printf("%s: %v\n", addr, err)
			ok = false
			continue
		}
		views[addr] = v
	}
	for _, addr := range addrs {
		v := views[addr]
		if v == nil {
			continue
		}
		if err := check(addr, v, addrs, views); err != nil {
			fmt.Printf("%s: %v\n", addr, err)
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}

func read(addr string) (*view, error) {
	cluster := gocql.NewCluster(addr)
	// Talk to this node alone, so its own tables are what we read.
	cluster.HostFilter = gocql.WhiteListHostFilter(addr)
	cluster.DisableInitialHostLookup = true
	cluster.Timeout = 5 * time.Second
	cluster.ConnectTimeout = 5 * time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("no CQL session: %w", err)
	}
	defer s.Close()

	v := &view{status: map[string]string{}, generation: map[string]int{}}
	// With storage_compatibility_mode NONE, nodes gossip status_with_port only.
	iter := s.Query(`SELECT address, status_with_port, generation FROM system_views.gossip_info`).Iter()
	var a, st string
	var gen int
	for iter.Scan(&a, &st, &gen) {
		v.status[a], v.generation[a] = st, gen
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("reading gossip_info: %w", err)
	}
	iter = s.Query(`SELECT peer FROM system.peers_v2`).Iter()
	var peer string
	for iter.Scan(&peer) {
		v.peers = append(v.peers, peer)
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("reading peers: %w", err)
	}
	return v, nil
}

// check says whether v, addr's view, sees every node of all as NORMAL in the generation
// that node reports for itself.
func check(addr string, v *view, all []string, views map[string]*view) error {
	var line []string
	var bad []string
	for _, want := range all {
		mark := "UN"
		switch own := views[want]; {
		case !strings.HasPrefix(v.status[want], "NORMAL"):
			mark = "??"
			bad = append(bad, fmt.Sprintf("%s is not NORMAL in gossip (%q)", want, v.status[want]))
		case own == nil || own.generation[want] != v.generation[want]:
			mark = "D?"
			bad = append(bad, fmt.Sprintf("%s is known in generation %d, not its current one", want, v.generation[want]))
		}
		line = append(line, want+" "+mark)
	}
	fmt.Printf("%s sees %d peer(s) %v: %s\n", addr, len(v.peers), v.peers, strings.Join(line, ", "))
	if len(v.peers) != len(all)-1 {
		return fmt.Errorf("expected %d peers, found %d", len(all)-1, len(v.peers))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}
