# The README's commands. `make test` is what CI runs (after `make lint`).

GO ?= go
FUZZTIME ?= 10s

.PHONY: all build daemon test test-unit browser-deps fuzz-short test-broken-build test-cluster lint bench clean

all: build

build:
	$(GO) build -o leasehold ./cmd/leasehold

# Runs the daemon on the embedded default (./leasehold-data, 127.0.0.1:7420).
daemon:
	$(GO) run ./cmd/leasehold daemon

# Every test, with the race detector (one package at a time: several start
# etcd members and daemon processes, and two cores are easily starved), then
# short fuzz runs, the broken-build check and the short cluster test.
test: test-unit fuzz-short test-broken-build test-cluster

# Screenshots of the browser test land in ARTIFACTS (kept by CI).
ARTIFACTS ?= $(CURDIR)/artifacts

test-unit: browser-deps
	LEASEHOLD_ARTIFACTS=$(ARTIFACTS) $(GO) test -race -count=1 -p 1 -timeout 15m ./...

# Headless Chromium for the dashboard's browser test (Debian's package; the
# test skips, saying why, if it cannot be installed).
browser-deps:
	@sh scripts/install-chromium.sh >/dev/null || echo "browser-deps: chromium could not be installed: the browser test will skip"

fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJob$$' -fuzztime $(FUZZTIME) ./coordinator/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeValue$$' -fuzztime $(FUZZTIME) ./localstore/
	$(GO) test -run '^$$' -fuzz '^FuzzCreateRequest$$' -fuzztime $(FUZZTIME) ./cmd/leasehold/
	$(GO) test -run '^$$' -fuzz '^FuzzLoneSurrogate$$' -fuzztime $(FUZZTIME) ./internal/jsontext/

# The multi-process fault test, short form, shared and embedded (about 2 and
# 1.5 minutes): real etcd members and daemons, a nemesis and a checker.
test-cluster:
	LEASEHOLD_CLUSTER_TEST=1 $(GO) test -count=1 -timeout 20m -run 'TestShort$$|TestShortEmbedded$$' -v ./cluster-test

# Proof that the safety tests can fail: in a build without the fencing
# condition (tag leasehold_nofence) the conformance suite must fail.
test-broken-build:
	@out=$$($(GO) test -count=1 -tags leasehold_nofence -run 'TestLocalstore/StaleTokenWritesRefused' ./coordinator/coordtest/ 2>&1); \
	if echo "$$out" | grep -q 'want ErrLeaseLost'; then \
		echo "ok: on a build without fencing the conformance suite fails, as it must"; \
	else echo "FAIL: the conformance suite did not catch a build without fencing:"; echo "$$out"; exit 1; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# The whole benchmark set, as one table (see scripts/bench.sh).
bench:
	bash scripts/bench.sh

clean:
	rm -f leasehold
