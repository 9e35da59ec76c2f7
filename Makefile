# The README's commands. Every target that needs Cassandra uses the hosts in
# SHARDQ_CASSANDRA_HOSTS, or a node on 127.0.0.1, or starts one for its own duration.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# Fuzz runs are counted in inputs, not time: Go before 1.27 can fail a timed run with
# "context deadline exceeded" when -fuzztime ends while a worker is mid-input
# (go.dev/issue/75804; FuzzID did so in a CI run). 100,000 inputs take about 5 s here.
FUZZTIME ?= 100000x

# The programs, the dashboard, the Prometheus and OpenTelemetry adapters and the adapter of
# the Apache driver v2 are modules of their own, so that a service importing shardq does
# not require their dependencies;
# `go ... ./...` at the root does not enter them, so every target runs in each too.
# GOWORK=off: a go.work in a clone would build the library with the other modules'
# requirements mixed in, unlike a service.
MODULES := bench cmd/demo cmd/shardq shardqprom shardqotel shardqui shardqgocqlv2
export GOWORK := off
# $(call each,GO-ARGS): `go GO-ARGS` in every module of MODULES, stopping at the first that fails.
each = for m in $(MODULES); do $(GO) -C $$m $(1) || exit 1; done

.PHONY: test test-nodes test-sim test-cluster sim demo bench lint cassandra-start cassandra-stop cassandra-status

# test-nodes, then test-sim.
test: test-nodes test-sim

# Vet, every test with the race detector (the library's longest packages first,
# scripts/packages; the modules two at a time, bench the longest) but the simulator's,
# the backlog test without it (BACKLOG_TEST), and a short run of each fuzz target.
test-nodes:
	scripts/with-cassandra sh -c '$(GO) vet ./... && $(GO) vet -tags faults ./internal/faults && $(GO) -C shardqgocqlv2 vet -tags faults . && $(call each,vet ./...) && pkgs=$$(GO=$(GO) scripts/packages --race) && \
		$(GO) test -race -count=1 -timeout 20m $$pkgs && \
		printf "%s\n" $(MODULES) | xargs -P 2 -I{} $(GO) -C {} test -race -count=1 -timeout 20m ./... && \
		$(GO) test -count=1 -run "^$(BACKLOG_TEST)$$" ./consumer && \
		$(GO) test -run=^$$ -fuzz=^FuzzKey$$ -fuzztime=$(FUZZTIME) ./shard && \
		$(GO) test -run=^$$ -fuzz=^FuzzID$$ -fuzztime=$(FUZZTIME) ./shard'

# The simulator's own tests, then SEEDS seeds (make sim); no Cassandra.
test-sim:
	SEEDS=$(SEEDS) SEED=$(SEED) BUDGET=$(BUDGET) GO=$(GO) scripts/sim --tests

# The deterministic simulator (internal/sim, no Cassandra): SEEDS seeded runs from SEED on,
# spread over the cores, or as many as fit in BUDGET (a Go duration) when it is set. A
# failing seed prints the command that replays it.
SEEDS ?= 2000
SEED ?= 1
BUDGET ?=
sim:
	SEEDS=$(SEEDS) SEED=$(SEED) BUDGET=$(BUDGET) GO=$(GO) scripts/sim

# On three local nodes (started for it unless SHARDQ_CASSANDRA_HOSTS names a cluster, or
# three already answer from SHARDQ_CASSANDRA_FIRST_ADDR on), at replication factor 3,
# where QUORUM and SERIAL need two replicas of three: the tests whose outcome replicas can
# change, CLUSTER_PACKAGES (the lock and its LWTs, node clocks, the take, swap and ack,
# the producer's writes, cancels and moves under locks) and CLUSTER_ROOT_TESTS (schema
# agreement between nodes, two client processes); then the fault tests (internal/faults:
# a node killed, frozen, restarted past gc_grace; workers killed), which signal and restart
# the nodes of scripts/cassandra; first those where the driver decides the outcome on the
# v2 adapter (V2_FAULT_TESTS), then all on v1. Their figures go to $(FAULTS_JSON) as JSON
# lines.
# Every test runs on one node in test. The whole library at RF 3 took 30 minutes on three
# JVMs sharing two cores and overloaded them (reads of 1.4 s, connections refused), which
# failed bounds that hold on a cluster of its own; inspect, series, worker and the other
# layers call the paths tested here.
# BACKLOG_TEST (150,000 tasks in one partition, past the tombstone failure threshold)
# tests how Cassandra's reads meet tombstones, which replication does not change: it runs
# in test, on one node, in 92 s; at RF 3 it took 522 s. SCAN_TESTS test the consumer's
# read plan (floors under writers' clock offsets, cursors, page sizes, far-future IDs,
# pass marks),
# which decides what to read from what came back, whatever the replicas: they run in
# test; at RF 3 on three fresh nodes they took 217 s of test time (the package: 420 s).
# ONE_NODE_TESTS check what the number of replicas does not change: stamps by a leading
# host clock and by coordinators (all three nodes share this host's clock), the cluster
# clock a first Reschedule measures, the inspector's view of a move cut between its two
# writes, the producer's middleware and its spread of low rates over shards; at RF 3 they
# took 396 s of test time.
FAULTS_JSON ?= $(CURDIR)/.run/faults.jsonl
BACKLOG_TEST := TestBacklogInOnePartition
SCAN_TESTS := TestFloorsHideNothing|TestPendingRetriesDoNotPinCursor|TestFinishedPartitionCheckedOnce|TestLargePayloads|TestDueAfter2262|TestNewConsumerSkipsPartitionsAMarkShowsEmpty
ONE_NODE_TESTS := TestLeadingClockDeletesWin|TestStatusAfterCrashes|TestRescheduleStampsByTheClusterClock|TestMiddleware|TestLowRatesSitInTheFirstShards
CLUSTER_PACKAGES := ./consumer ./producer ./lock ./internal/locking ./internal/lwt ./internal/clustertime
V2_FAULT_TESTS := TestNodeFrozen|TestSlowReadOnOneNode
CLUSTER_ROOT_TESTS := ^(TestApplySchemaTwice|TestClientsInTwoProcesses)$$
test-cluster:
	mkdir -p $(dir $(FAULTS_JSON))
	scripts/with-cassandra --nodes 3 sh -c 'export SHARDQ_CASSANDRA_RF=3 && \
		$(GO) test -count=1 -timeout 20m -skip "^($(BACKLOG_TEST)|$(SCAN_TESTS)|$(ONE_NODE_TESTS))$$" $(CLUSTER_PACKAGES) && \
		$(GO) test -count=1 -timeout 20m -run "$(CLUSTER_ROOT_TESTS)" . && \
		export SHARDQ_FAULTS_JSON=$(FAULTS_JSON) && \
		$(GO) -C shardqgocqlv2 test -tags faults -count=1 -timeout 10m -v -run "^($(V2_FAULT_TESTS))$$" . && \
		$(GO) test -tags faults -count=1 -timeout 30m -v ./internal/faults'

# 10,000 tasks due over 10 s, drained by 4 consumers: throughput, lateness, lost/duplicates.
demo:
	scripts/with-cassandra $(GO) -C cmd/demo run .

# The standard benchmark set (about 8 minutes here before steady, which adds its 20 s of
# due tasks and a lead of about 10 s): every workload at its default size, steady right
# after burst-worker, whose Cassandra CPU per task it is compared with, then trickle again
# at 2,000 tasks/s (all runs it at its default 10/s).
# Results go to bench/results/: JSON lines, and the sweep's chart. The bench runs in bench/
# (its module), so its paths are relative to that.
bench:
	mkdir -p bench/results
	scripts/with-cassandra sh -c 'out=results/$$(date +%Y%m%d-%H%M%S).jsonl && \
		$(GO) -C bench run . -workload all -json $$out -chart results/sweep.png && \
		$(GO) -C bench run . -workload trickle -trickle-rate 2000 -json $$out'

lint:
	$(GO) vet ./... && $(call each,vet ./...)
	$(GO) run $(STATICCHECK) ./... && $(call each,run $(STATICCHECK) ./...)

cassandra-start:
	scripts/cassandra start $(if $(NODES),--nodes $(NODES)) $(if $(FIRST_ADDR),--first-address $(FIRST_ADDR))

cassandra-stop:
	scripts/cassandra stop

cassandra-status:
	scripts/cassandra status
