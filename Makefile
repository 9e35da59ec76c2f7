# The README's commands. Every target that needs Cassandra uses the hosts in
# SHARDQ_CASSANDRA_HOSTS, or a node on 127.0.0.1, or starts one for its own duration.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@2025.1.1

.PHONY: test lint cassandra-start cassandra-stop cassandra-status

test:
	scripts/with-cassandra sh -c '$(GO) vet ./... && $(GO) test -race -count=1 ./...'

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

cassandra-start:
	scripts/cassandra start $(if $(NODES),--nodes $(NODES))

cassandra-stop:
	scripts/cassandra stop

cassandra-status:
	scripts/cassandra status
