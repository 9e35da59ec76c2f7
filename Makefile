# The README's commands. Every target that needs Cassandra uses the hosts in
# SHARDQ_CASSANDRA_HOSTS, or a node on 127.0.0.1, or starts one for its own duration.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

FUZZTIME ?= 10s

.PHONY: test demo bench lint cassandra-start cassandra-stop cassandra-status

# Vet, every test with the race detector, then a short run of each fuzz target.
test:
	scripts/with-cassandra sh -c '$(GO) vet ./... && $(GO) test -race -count=1 ./... && \
		$(GO) test -run=^$$ -fuzz=^FuzzKey$$ -fuzztime=$(FUZZTIME) ./shard && \
		$(GO) test -run=^$$ -fuzz=^FuzzID$$ -fuzztime=$(FUZZTIME) ./shard'

# 10,000 tasks due over 10 s, drained by 4 consumers: throughput, lateness, lost/duplicates.
demo:
	scripts/with-cassandra $(GO) run ./cmd/demo

# The standard benchmark set (about 8 minutes here): every workload at its default size,
# then trickle again at 2,000 tasks/s (all runs it at its default 10/s).
# Results go to bench/results/: JSON lines, and the sweep's chart.
bench:
	mkdir -p bench/results
	scripts/with-cassandra sh -c 'out=bench/results/$$(date +%Y%m%d-%H%M%S).jsonl && \
		$(GO) run ./bench -workload all -json $$out -chart bench/results/sweep.png && \
		$(GO) run ./bench -workload trickle -trickle-rate 2000 -json $$out'

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

cassandra-start:
	scripts/cassandra start $(if $(NODES),--nodes $(NODES)) $(if $(FIRST_ADDR),--first-address $(FIRST_ADDR))

cassandra-stop:
	scripts/cassandra stop

cassandra-status:
	scripts/cassandra status
