// Command ring prints each node's view of the ring, read over CQL: the node itself from
// system.local, and every peer from system.peers_v2 with its gossip status from
// system_views.gossip_info. It exits non-zero unless every node sees every other as up
// and NORMAL ("UN"). scripts/cassandra status runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

func main() {
	hosts := flag.String("hosts", "127.0.0.1", "comma-separated node addresses")
	flag.Parse()
	addrs := strings.Split(*hosts, ",")
	ok := true
	for _, addr := range addrs {
		if err := check(addr, addrs); err != nil {
			fmt.Printf("%s: %v\n", addr, err)
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}

func check(addr string, all []string) error {
	cluster := gocql.NewCluster(addr)
	// Talk to this node alone, so its own tables are what we read.
	cluster.HostFilter = gocql.WhiteListHostFilter(addr)
	cluster.DisableInitialHostLookup = true
	cluster.Timeout = 5 * time.Second
	cluster.ConnectTimeout = 5 * time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		return fmt.Errorf("no CQL session: %w", err)
	}
	defer s.Close()

	status := map[string]string{}
	// With storage_compatibility_mode NONE, nodes gossip status_with_port only.
	iter := s.Query(`SELECT address, status_with_port FROM system_views.gossip_info`).Iter()
	var a, st string
	for iter.Scan(&a, &st) {
		status[a] = st
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("reading gossip_info: %w", err)
	}
	var peers []string
	iter = s.Query(`SELECT peer FROM system.peers_v2`).Iter()
	var peer string
	for iter.Scan(&peer) {
		peers = append(peers, peer)
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("reading peers: %w", err)
	}
	var line []string
	for _, want := range all {
		mark := "UN"
		if !strings.HasPrefix(status[want], "NORMAL") {
			mark = "??"
		}
		line = append(line, want+" "+mark)
	}
	fmt.Printf("%s sees %d peer(s) %v: %s\n", addr, len(peers), peers, strings.Join(line, ", "))
	if len(peers) != len(all)-1 {
		return fmt.Errorf("expected %d peers, found %d", len(all)-1, len(peers))
	}
	for _, want := range all {
		if !strings.HasPrefix(status[want], "NORMAL") {
			return fmt.Errorf("%s is not NORMAL in gossip (%q)", want, status[want])
		}
	}
	return nil
}
