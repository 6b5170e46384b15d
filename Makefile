# sbx: one binary. `make run` builds and starts the daemon on embedded defaults;
# `make test` installs what the tests need and runs them (as root: the jail tests
# use real namespaces, cgroups and overlayfs).

GO      ?= go
BIN     := bin/sbx
# What runs inside every sandbox, built first and embedded in sbx
# (internal/agentbin): a sandbox's Go start then loads the agent only.
AGENT   := internal/agentbin/bin/sbx-agent
GOFLAGS ?=
# A static, cgo-free binary: the same file runs as the daemon and, inside every
# sandbox, as the init and agent, whatever libc the sandbox's root holds; and
# only without cgo can the init confine every thread (syscall.AllThreadsSyscall).
CGO_ENABLED := 0
export GOFLAGS CGO_ENABLED

.PHONY: all agent build run test test-unit test-e2e test-security deps deps-test bench soak soak-crash generate check-generated vet fmt clean

all: build

agent:
	$(GO) build -o $(AGENT) ./cmd/sbx-agent

build: agent
	$(GO) build -o $(BIN) ./cmd/sbx

# Starts `sbx serve` on the defaults: native backend, SQLite store in /var/lib/sbx
# (as root), 127.0.0.1:7070 and <data-dir>/sbx.sock.
run: build
	@command -v mkfs.btrfs >/dev/null 2>&1 || { echo "installing btrfs-progs (the native backend's disk quotas)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends btrfs-progs >/dev/null; }
	./$(BIN) serve

# Debian packages the tests (and the bench's peer) need, then Go modules.
deps:
	./scripts/deps.sh

test: deps agent vet
	$(GO) test -count=1 -timeout 30m ./...

test-unit: agent vet
	$(GO) test -count=1 -short ./...

test-e2e: build
	$(GO) test -count=1 -v -timeout 20m ./test/e2e/...

# The attack catalogue (SECURITY.md §5): every row implemented so far, on the
# backends in SBX_TEST_BACKENDS (default native,local); SBX_SOAK=1 runs the
# full variants. It prints the verdict table; `make test` runs it too.
test-security: build
	$(GO) test -count=1 -v -timeout 20m -run '^TestSecurity$$' ./test/e2e/

bench: deps build
	./$(BIN) bench

# The long variants: every catalogue row in full (SBX_SOAK=1: pid reuse tried for
# 10 minutes, longer fuzz and race runs, a 4 GiB upload), then the crash soak.
soak: build
	SBX_SOAK=1 $(GO) test -count=1 -v -timeout 2h -run '^TestSecurity$$' ./test/e2e/
	$(MAKE) soak-crash

# RL-02 in full: the daemon killed at each create step, 20 times per step (make
# test runs 3). The test builds its own binary with -tags sbxfault.
soak-crash:
	SBX_CRASH_RUNS=20 $(GO) test -count=1 -v -timeout 1h -run TestCrashMidCreate ./test/e2e/

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

bin/protoc-gen-go bin/protoc-gen-connect-go bin/protoc-gen-go-vtproto:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o bin/protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go
	$(GO) build -o bin/protoc-gen-go-vtproto github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto

generate: bin/protoc-gen-go bin/protoc-gen-connect-go bin/protoc-gen-go-vtproto
	cd api/agent && $(GO) generate ./...

# CI: regenerating must not change checked-in code.
check-generated: generate
	git diff --exit-code -- api/

clean:
	rm -rf bin $(AGENT)
