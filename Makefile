# coupond: build, run, test. `make test` is what CI runs.
GO ?= go
BIN ?= bin/coupond
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/coupond/coupond/cli.version=$(VERSION) -X github.com/coupond/coupond/cli.commit=$(COMMIT)

.PHONY: build run test lint bench fuzz lab lab-runs lab-worlds lab-tune clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

run: build
	./$(BIN) serve

# lint + race-enabled tests; long soaks and big benchmarks stay behind -short guards or the targets below.
test: lint
	$(GO) test -race -short -count=1 -timeout 12m ./...

# An untidy go.mod, a vet finding or a staticcheck finding fails the build.
# staticcheck is pinned in go.mod's tool block: "go tool" builds that version.
lint:
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

FUZZTIME ?= 30s
# Runs every native fuzz test of the module for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
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

clean:
	rm -rf bin
