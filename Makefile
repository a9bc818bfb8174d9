# phonefleet — the two commands: `make run` and `make test`.
GO       ?= go
BIN      := bin/phonefleet
PKGS     := ./...
TESTFLAGS ?= -race -count=1 -timeout 20m -p 1

.PHONY: run test build bench lint changelog migrate deps deps-adb deps-stripe-mock deps-nats deps-chromium deps-walkthrough clean fuzz chaos

## run: start the service on 127.0.0.1:8080 in local mode (embedded PostgreSQL unless DATABASE_URL is set; SERVICE_ADB_SIM_DEVICES=N adds N sim phones served over adb; STRIPE_MOCK=1 runs stripe-mock as the payment provider)
run: deps build
	@if [ "$${SERVICE_ADB_SIM_DEVICES:-0}" != 0 ]; then ./scripts/ensure-adb.sh; fi
	@if [ "$${STRIPE_MOCK:-0}" != 0 ]; then GO=$(GO) ./scripts/ensure-stripe-mock.sh --run ./$(BIN) serve; else ./$(BIN) serve; fi

## test: every test, against a real PostgreSQL (DATABASE_URL/TEST_DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster, stopped again at the end when this run started it)
test: deps deps-adb deps-stripe-mock deps-nats deps-chromium deps-walkthrough
	$(GO) vet $(PKGS)
	sm="$$(GO=$(GO) ./scripts/ensure-stripe-mock.sh)" && ns="$$(GO=$(GO) ./scripts/ensure-nats-server.sh)" && PHONEFLEET_STRIPE_MOCK="$$sm" PHONEFLEET_NATS_SERVER="$$ns" ./scripts/run-tests.sh $(GO) test $(TESTFLAGS) $(PKGS)

## build: the binary at bin/phonefleet
build:
	$(GO) build -o $(BIN) ./cmd/phonefleet

## chaos: the chaos suite's long form (chaos/): two instances, nats-server, a gateway with sims and an adb phone, webhooks, REST and MCP clients and runs, while each part is killed, restarted or cut in turn for CHAOS_DURATION (default 15m); prints its counts at the end (its short form, one pass, runs in `make test`)
CHAOS_DURATION ?= 15m
chaos: deps-adb deps-nats
	ns="$$(GO=$(GO) ./scripts/ensure-nats-server.sh)" && PHONEFLEET_NATS_SERVER="$$ns" CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -timeout 4h -run '^TestChaos$$' -v ./chaos/

## bench: performance figures beside baselines measured in the same run (pgbench on the same database)
bench: deps deps-nats
	ns="$$(GO=$(GO) ./scripts/ensure-nats-server.sh)" && PHONEFLEET_NATS_SERVER="$$ns" $(GO) run ./cmd/pfbench $(BENCHFLAGS)

## bench-compare: pfbench of OLD_REV (default 0725ed3) vs NEW_REV (default the working tree), run OLD NEW OLD NEW on the same database, with the noise beside the change
.PHONY: bench-compare
bench-compare: deps
	GO=$(GO) OLD_REV=$(OLD_REV) NEW_REV=$(NEW_REV) PFBENCH_FLAGS="$(BENCHFLAGS)" ./scripts/bench-compare.sh

## lint: gofmt, go vet, and the contract changelog check (a shape changed without a changelog entry fails)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run ./cmd/changelog -check

## changelog: record in http/contract/changelog.json every operation and tool added, moved or removed since http/contract/baseline.json, and the registry's deprecations and meaning changes; review the entries and commit both files (docs/contract-evolution.md)
changelog:
	$(GO) run ./cmd/changelog

## migrate: apply database migrations
migrate: deps build
	./$(BIN) migrate

## fuzz: run every fuzz target for FUZZTIME each (e.g. make fuzz FUZZTIME=10m), keep the corpus each finds in its package's testdata/fuzz (at most FUZZKEEP files a target), run them all even when one fails, and end with a summary (non-zero on a failure); FUZZRUN limits the targets by name, FUZZPARALLEL the fuzzer's workers
FUZZTIME ?= 20s
fuzz:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh $(PKGS)

deps:
	@./scripts/ensure-postgres.sh

## deps-adb: the adb command (Debian package adb), which the tests run as a real adb server
deps-adb:
	@if [ "$${PHONEFLEET_TEST_ADB:-}" != skip ]; then ./scripts/ensure-adb.sh; fi

## deps-stripe-mock: stripe-mock (go install github.com/stripe/stripe-mock@v0.189.0), which the payment tests run as the payment provider
deps-stripe-mock:
	@GO=$(GO) ./scripts/ensure-stripe-mock.sh >/dev/null

## deps-nats: nats-server (go install github.com/nats-io/nats-server/v2@v2.15.2), which each test binary that needs the message bus runs privately
deps-nats:
	@GO=$(GO) ./scripts/ensure-nats-server.sh >/dev/null

## deps-chromium: a headless Chromium (Debian package chromium, or PHONEFLEET_CHROMIUM), which the console's browser tests drive with chromedp
deps-chromium:
	@if [ "$${PHONEFLEET_TEST_BROWSER:-}" != skip ]; then ./scripts/ensure-chromium.sh; fi

## deps-walkthrough: curl and jq, which the README's commands use (the walk-through test runs them)
deps-walkthrough:
	@./scripts/ensure-walkthrough-tools.sh

clean:
	rm -rf bin
