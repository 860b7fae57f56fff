# opzero: the two commands a new machine needs are `make demo` and `make test`.
# Everything else is built on demand from pinned Go modules into opzero's user
# cache (`opzero install`, ~/.cache/opzero/<pins>) and linked from bin/.

GO        ?= go
GOTEST    ?= $(GO) test -race -count=1 -timeout 20m
PKGS      ?= ./...

.PHONY: all bins knative-bins otel-bins cluster-bins postgres opzero test unit matrix demo demo-postgres clean help bench bench-coldstart bench-hubscale bench-plan fuzz e2e-cluster e2e-cluster-knative e2e-knative e2e-book

all: opzero

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

bins: ## make the pinned control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) ready in opzero's cache, linked from bin/
	@bash hack/build-bins.sh controlplane

knative-bins: ## make Knative's real ApiServerSource and PingSource adapters and CRDs ready in opzero's cache, linked from bin/
	@bash hack/build-bins.sh knative

otel-bins: ## make the OpenTelemetry Collector's OTLP receiver (the telemetry tests' real collector) ready in opzero's cache, linked from bin/
	@bash hack/build-bins.sh otelcol

cluster-bins: ## make the one-node cluster's binaries ready (kubelet, kube-proxy, kube-scheduler, CoreDNS, pause, netcheck) and, as root, Debian's containerd, runc, CNI plugins and iptables
	$(GO) run ./cmd/opzero install cluster

e2e-cluster: bins cluster-bins ## (root) a real one-node cluster: CoreDNS Running, a Service reached by its DNS name from another pod, `cluster down` leaves nothing behind; not part of make test
	OPZERO_E2E_CLUSTER=1 $(GO) test -race -count=1 -timeout 20m -run '^TestCluster$$' -v ./internal/devenv/cluster

e2e-cluster-knative: bins cluster-bins ## (root) e2e-cluster with Knative Serving and Eventing v0.50.0 installed from their release YAMLs: every component Running, a Knative Service's revision Ready
	$(GO) run ./cmd/opzero install knative-cluster
	OPZERO_E2E_CLUSTER=1 OPZERO_E2E_KNATIVE=1 $(GO) test -race -count=1 -timeout 30m -run '^TestCluster$$' -v ./internal/devenv/cluster

e2e-knative: bins cluster-bins ## (root) what `opzero manifests` generates for the examples, applied unchanged on real Knative (a running `opzero cluster up --knative`, else one of its own), wired by the hub (the default) and by --source=knative: create, ConfigMap edit, scale to zero, a Wakeup at zero, OIDC, cold start figures of both wirings, the adopted kubebuilder projects (memcached, multigroup), scale-out to max-scale 3, examples/bundles (its webhook, targets in every namespace, a target restored at zero), the Metacontroller HelloWorld with its Python hook, kubebuilder projects built unchanged and served at zero by the hub (a fleet of ten, webhooks, a Node.js operator), and a fleet of ten of different shapes classic vs at zero; not part of make test
	$(GO) run ./cmd/opzero install knative-cluster
	OPZERO_E2E_KNATIVE_OPERATORS=1 $(GO) test -race -count=1 -timeout 100m -run '^TestKnativeOperators$$' -v ./internal/devenv/cluster

e2e-book: bins cluster-bins ## (root) the book's pages on the real cluster: their "sh e2e" blocks run as written, in order with the page's run blocks (make test only checks them); not part of make test
	OPZERO_E2E_BOOK=1 $(GO) test -count=1 -timeout 90m -run '^TestBook$$' -v ./internal/booktest

postgres: ## find PostgreSQL's server binaries (initdb, postgres), or install Debian's postgresql package when root (for examples/postgres)
	@bash hack/install-postgres.sh >/dev/null

opzero: ## build the opzero CLI into bin/opzero
	$(GO) build -o bin/opzero ./cmd/opzero

test: bins knative-bins otel-bins postgres ## build what the tests need, run every test with -race against a real control plane (and PostgreSQL for examples/postgres; examples/bundles, a module of its own, too), then fuzz briefly
	$(GOTEST) $(PKGS)
	cd examples/postgres && $(GOTEST) ./...
	cd examples/bundles && $(GOTEST) ./...
	@$(MAKE) --no-print-directory fuzz

FUZZTIME ?= 50000x
fuzz: ## run each fuzz target for FUZZTIME executions (default 50000x: a count, not a duration, which go1.26's fuzz coordinator can fail at its end with "context deadline exceeded", golang/go#75804; e.g. FUZZTIME=30s)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./internal/cloudevent/receive
	$(GO) test -run '^$$' -fuzz '^FuzzServeHTTP$$' -fuzztime $(FUZZTIME) ./internal/engine/serverless/fuzztest

matrix: bins knative-bins ## the supported controller-runtime range (v0.21 to v0.25): build, vet, adoption unit and e2e tests on the oldest, one between and the newest (hack/matrix.sh; not part of make test)
	@bash hack/matrix.sh

unit: ## run only the tests that need no control plane
	$(GOTEST) -short $(PKGS)
	cd examples/postgres && $(GOTEST) -short ./...
	cd examples/bundles && $(GOTEST) -short ./...

demo: bins knative-bins ## the main job: ConfigWatcher running serverless through `opzero dev` on the local control plane
	@bash hack/demo.sh

demo-postgres: bins knative-bins postgres ## the Database operator for a real PostgreSQL: drift made by hand wakes it from zero through the bridge, a Broker and a Trigger
	@bash hack/demo-postgres.sh

clean: ## remove bin/ (the pinned binaries stay in opzero's cache: `go run ./cmd/opzero install --print-dir`)
	rm -rf bin

bench: bins knative-bins ## opzero vs controller-runtime and vs the engine before (5042ed2): memory, cold start, throughput, intake, scale-out, the wakeup source; writes docs/benchmarks.md after each part (not part of make test)
	$(GO) run ./bench/suite

bench-coldstart: bins ## only exec -> ready and exec -> first event reconciled at 2000 ConfigMaps
	$(GO) run ./bench/suite -only coldstart

bench-plan: bins ## only opzero plan (issue 51): writes reaching etcd during a plan of 2000 objects, plan time over a real converge of the same 2000 (ratio), objects whose plan of a 200-object ConfigWatcher upgrade differs from what the real reconcile wrote
	$(GO) run ./bench/plan

bench-hubscale: bins ## only the hub with 100 Subscriptions over 100k ConfigMaps: its RSS, delivery latency beside the API server's watch latency, CPU per 1000 changes (replaces its section of docs/benchmarks.md)
	$(GO) run ./bench/suite -only hubscale
