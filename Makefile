# hpcdap: one entry point for building, the demo and the test suite.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
FUZZTIME ?= 8s
# Packages whose tests exercise concurrency run under the race detector too.
RACE_PKGS := ./cdti/... ./target/... ./agent/... ./launch/...

.PHONY: all build deps test test-go test-race test-pmix test-editors fuzz vet fmt-check test-extension test-e2e demo clean

all: build

# PMIX_TAGS adds the PMIx tool (launch/pmix) when libpmix's development files are installed.
PMIX_TAGS := $(shell pkg-config --exists pmix 2>/dev/null && echo -tags pmix)

build:
	$(GO) build $(PMIX_TAGS) -o bin/hpcdap ./cmd/hpcdap
	$(CC) -O1 -g -o bin/hpcdap-runjob bgq/helper/runjob.c

deps:
	./scripts/install-deps.sh
	./scripts/qemu-user.sh >/dev/null

## test: install what the suite needs, then run every check CI runs.
test: deps fmt-check vet test-go test-race test-pmix test-editors fuzz test-extension test-e2e

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(if $(PMIX_TAGS),$(GO) vet $(PMIX_TAGS) ./...)

test-go:
	$(GO) test -count=1 -timeout 20m ./...

test-race:
	$(GO) test -count=1 -race -timeout 20m $(RACE_PKGS)

## test-pmix: the PMIx tests against Open MPI 5 / PRRTE, inside a Debian 13 root.
test-pmix:
	./scripts/debian13-root.sh ensure
	./scripts/debian13-root.sh run -- $(GO) test -count=1 -tags pmix -timeout 10m ./launch/pmix/...
	./scripts/debian13-root.sh run -- $(GO) test -count=1 -tags pmix -timeout 15m -run 'PMIx|ChooseProtocol' ./launch/ ./adapter/

## test-editors: Emacs's DAP client (dape, Debian's package) drives a 4-rank session, inside the
## Debian 13 root, whose Emacs and dape are recent enough.
test-editors:
	./scripts/debian13-root.sh ensure
	./scripts/debian13-root.sh run -- tests/editors/run-dape.sh

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## test-extension: the VS Code extension's unit tests and its DAP tests against bin/hpcdap.
test-extension: build
	cd vscode-extension && npm ci --no-audit --no-fund && HPCDAP_BIN=$(CURDIR)/bin/hpcdap npm test

## test-e2e: the extension in a real VS Code (code-server in headless Chromium).
test-e2e: build
	./vscode-extension/e2e/setup.sh
	cd vscode-extension && HPCDAP_BIN=$(CURDIR)/bin/hpcdap npm run test:e2e

demo: build
	./scripts/install-deps.sh demo
	./bin/hpcdap demo

clean:
	rm -rf bin dist
