# pveflow: durable Proxmox VE proxy-VM lifecycles on Temporal.
#   make run    the whole thing on this machine: Temporal + UI, the Proxmox simulator, a worker,
#               and a demo proxy created and deleted
#   make test   every test
#   make chaos  the long chaos run (docs/reliability.md); make test runs its short version
#   make cluster  make run on a real Temporal cluster: PostgreSQL and two server processes
GO ?= go
BIN := $(CURDIR)/bin
TOOLS := $(BIN)/tools
STATICCHECK_VERSION := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0

# The embedded Temporal server is a module of its own, so that importing pveflow's packages
# never brings the server's dependency graph along. Tests that need a server run it as a
# process (internal/testserver), built once here and named by PVEFLOW_TEMPORAL_BIN.
DEVSERVER := internal/devserver
TEMPORAL_BIN := bin/pveflow-temporal
export PVEFLOW_TEMPORAL_BIN := $(CURDIR)/$(TEMPORAL_BIN)

.PHONY: all build test test-pveflow test-devserver test-integration-proxmox compose-check lint vet fmt-check staticcheck \
	workflowcheck bench chaos histories run run-stalled cluster announce clean $(TEMPORAL_BIN)

all: build test

build: $(TEMPORAL_BIN)
	$(GO) build ./...
	$(GO) build -ldflags '$(VCS_LDFLAGS)' -o $(BIN)/ ./worker ./starter/cmd/pveflow ./internal/pvesim/cmd/pvesim

# The commit the binaries are built from, for `pveflow version`, `worker --version` and the
# worker's build ID (internal/buildinfo): stamped here because go build's own stamp is off
# wherever -buildvcs=false is set (a go env file, a build machine). Empty outside a git checkout.
BUILDINFO := github.com/pveflow/pveflow/internal/buildinfo
VCS_LDFLAGS = $(shell git rev-parse HEAD >/dev/null 2>&1 && \
	echo "-X $(BUILDINFO).revision=$$(git rev-parse HEAD)" \
		"-X $(BUILDINFO).release=$$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//')" \
		"-X $(BUILDINFO).revisionTime=$$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)" \
		"-X $(BUILDINFO).modified=$$(test -z "$$(git status --porcelain)" && echo false || echo true)")

# Always handed to go build, which knows whether anything changed.
$(TEMPORAL_BIN):
	cd $(DEVSERVER) && $(GO) build -o $(CURDIR)/$(TEMPORAL_BIN) ./cmd/pveflow-temporal

test: test-pveflow test-devserver compose-check

# With the server out of the test binaries, every package runs under the race detector. A failing
# package prints its whole output; the names of what failed are repeated at the end, where a CI
# log's tail shows them, and the whole output is kept in bin/test.log.
test-pveflow: $(TEMPORAL_BIN)
	@mkdir -p $(BIN); { $(GO) test -race -count=1 -timeout 20m ./... 2>&1; echo $$? > $(BIN)/test.rc; } | tee $(BIN)/test.log; \
	rc=$$(cat $(BIN)/test.rc); if [ "$$rc" != 0 ]; then \
		echo; echo "make test: what failed (the whole output is in bin/test.log):"; \
		grep -E -- '^[[:space:]]*--- FAIL|^panic:|^FAIL[[:space:]]|[^[:space:]]_test\.go:[0-9]+:|^[[:space:]]+(Error|Messages):' $(BIN)/test.log | head -60; \
	fi; exit $$rc

# The dev server's own tests run it in-process, without the race detector: instrumenting the
# server takes longer to build than all the other tests take to run.
test-devserver:
	cd $(DEVSERVER) && $(GO) test -count=1 -timeout 10m ./...

# The real-host test creates a proxy on the Proxmox VE host that the PROXMOX_TEST_* variables name
# and deletes it (docs/proxmox.md). Neither make test nor CI runs it. Without PROXMOX_TEST_URL
# the test would skip, so the target refuses to start; the test itself names any other variable
# that is missing.
test-integration-proxmox: $(TEMPORAL_BIN)
	@test -n "$$PROXMOX_TEST_URL" || { echo "test-integration-proxmox needs PROXMOX_TEST_URL and the other PROXMOX_TEST_* variables: see docs/proxmox.md"; exit 1; }
	$(GO) test -race -tags=integration -count=1 -v -timeout 30m -run TestProxmox ./internal/integration/

# No Docker engine runs here: docker-compose.yaml is validated, never run, with Debian's
# docker-compose (1.29), which knows profiles and depends_on conditions, and the Prometheus
# configuration it mounts with Debian's promtool. What they cannot check (README, search
# attributes and mounted files in step with the file) compose/compose_test.go does.
compose-check:
	@command -v docker-compose >/dev/null || { echo "compose-check needs docker-compose: apt-get install -y docker-compose"; exit 1; }
	@command -v promtool >/dev/null || { echo "compose-check needs promtool: apt-get install -y prometheus"; exit 1; }
	docker-compose -f docker-compose.yaml --profile proxmox --profile simulator config -q
	promtool check config compose/prometheus.yml

lint: fmt-check vet staticcheck workflowcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags record ./internal/e2e/
	$(GO) vet -tags integration ./...
	cd $(DEVSERVER) && $(GO) vet ./...

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(TOOLS)/workflowcheck:
	GOBIN=$(TOOLS) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

staticcheck: $(TOOLS)/staticcheck
	$(TOOLS)/staticcheck ./...
	cd $(DEVSERVER) && $(TOOLS)/staticcheck ./...

# Workflow code must be deterministic: no I/O, no wall clock, no randomness, no map ranging.
workflowcheck: $(TOOLS)/workflowcheck
	$(TOOLS)/workflowcheck -show-pos ./workflows/...

# The end-to-end benchmarks run whole stacks for a minute or more, so one iteration is all the
# benchmark time each gets; the timeout leaves room for all of their runs. After them comes
# docs/performance.md's table of figures and goals (internal/benchtable), which fails the target
# when a goal is missed or a figure's benchmark did not run. -p 1: no package is built while
# another's benchmarks run (the first ones, the clone slots under kills among them, shared the
# machine's two cores with the builds of the rest).
bench: $(TEMPORAL_BIN)
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -timeout 60m ./... 2>&1 | $(GO) run ./internal/benchtable

# The long chaos run: 120 proxies created and deleted while the workers are SIGKILLed every 5 to
# 20 s, the server once, and 20% of Proxmox calls fail (docs/reliability.md), on the embedded
# server and then on make cluster's topology (one of its two server processes killed). It takes
# about 8 minutes each; PVEFLOW_CHAOS_SEED picks another seed.
chaos: $(TEMPORAL_BIN)
	PVEFLOW_CHAOS_LONG=1 $(GO) test -count=1 -v -timeout 60m -run TestChaos ./internal/chaos/

# Records, from real runs on temporaltest, the scenarios that have no history in
# testdata/histories yet. An existing history is never recorded again: old ones must replay.
histories: $(TEMPORAL_BIN)
	$(GO) test -tags record -count=1 -run TestRecordHistories ./internal/e2e/

run: announce build
	internal/demo/run.sh demo

run-stalled: announce build
	internal/demo/run.sh stalled

# The production topology on this machine, without Docker: PostgreSQL from Debian's package
# (apt-get install -y postgresql) in .run/postgres, Temporal's schemas by its own SQL tool, and
# two Temporal server processes on it as one cluster (docs/deploy.md, "make cluster").
cluster: announce build
	internal/demo/run.sh cluster

# Before the build: a second stack says at once that one runs, and leaves its files alone.
announce:
	@internal/demo/run.sh check
	@echo "Building pveflow; the first build compiles the Temporal server and takes several minutes."

clean:
	@[ ! -e $(BIN) ] || echo "make clean: removing $(BIN)/ (the binaries)"
	@[ ! -e .run ] || echo "make clean: removing $(CURDIR)/.run/ (make run's Temporal database, simulated cluster, codec key and logs)"
	@rm -rf $(BIN) .run
