# coupond: build, run, test. `make test` is what CI runs.
GO ?= go
BIN ?= bin/coupond
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/coupond/coupond/cli.version=$(VERSION) -X github.com/coupond/coupond/cli.commit=$(COMMIT)

.PHONY: build run test lint bench bench-http fuzz lab lab-runs lab-worlds lab-tune lab-scenarios clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

run: build
	./$(BIN) serve

# lint + race-enabled tests; long soaks and big benchmarks stay behind -short guards or the targets below.
test: lint
	$(GO) test -race -short -count=1 -timeout 12m ./...

# An untidy go.mod, a file gofmt would change, a vet finding or a staticcheck
# finding fails the build. staticcheck is pinned in go.mod's tool block: "go
# tool" builds that version.
lint:
	$(GO) mod tidy -diff
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt -l:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

# Issue 20's measurements over HTTP, each against its baseline in the same run: every command
# starts its own server (and baseline) on a temporary data dir and loads the history it needs.
# Run it on a quiet machine; it takes about 10 minutes.
BENCH_CUSTOMERS ?= 100000
BENCH_RATES ?= 500,1000,2000,4000,8000
bench-http: build
	./$(BIN) bench decisions --baseline --customers $(BENCH_CUSTOMERS) --rates $(BENCH_RATES) --duration 20s
	./$(BIN) bench decisions --baseline --customers $(BENCH_CUSTOMERS) --rates 2000 --duration 20s --during batch
	./$(BIN) bench decisions --baseline --customers $(BENCH_CUSTOMERS) --rates 2000 --duration 20s --during learner
	./$(BIN) bench events --baseline --duration 20s
	./$(BIN) bench batch --customers 500000

FUZZTIME ?= 30s
# Runs every native fuzz test of the module for FUZZTIME each. Go 1.26's fuzz
# coordinator can fail a target at the -fuzztime deadline with a bare
# "context deadline exceeded" on a busy machine (golang/go#75804, fixed in
# Go 1.27): such a run, with no failing input written, is run once more;
# any other failure stops.
fuzz:
	@set -e; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			for try in 1 2; do \
				echo "== $$pkg $$f"; \
				if $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >"$$log" 2>&1; then cat "$$log"; break; fi; \
				cat "$$log"; \
				if [ $$try = 2 ] || ! grep -q 'context deadline exceeded' "$$log" || grep -q 'Failing input written' "$$log"; then exit 1; fi; \
				echo "== $$f stopped at its deadline with no failing input (golang/go#75804): once more"; \
			done; \
		done; \
	done

lab: build
	./$(BIN) lab

lab-runs: build
	./$(BIN) lab --runs 8

# 30 worlds on the report seeds (1001-1030), which nobody tunes on.
lab-worlds: build
	./$(BIN) lab --worlds 30 --seeds report

# 30 worlds on the tuning seeds (1-30).
lab-tune: build
	./$(BIN) lab --worlds 30 --seeds tune

# Issue 18's scenario worlds at the sizes their lines need (a few minutes).
lab-scenarios:
	$(GO) test -count=1 -timeout 30m -v -run 'TestRareBuyers|TestTwoEqualTreatments|TestBetterTreatmentWins|TestEmailsThatPay|TestReplayHalves|TestGuard$$' ./engine/lab

clean:
	rm -rf bin
