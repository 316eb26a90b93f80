# The everyday verbs of rpcrdma. `make run` and `make test` do all set-up on a fresh Debian machine.

SHELL := /bin/bash
CARGO ?= cargo
RPCRDMA := target/release/rpcrdma
FUZZ_SECONDS ?= 30

# Debian packages the build needs beyond the Rust toolchain.
DEB_PACKAGES := build-essential pkg-config libibverbs-dev librdmacm-dev libclang1-14 libclang-common-14-dev valgrind

.PHONY: all deps run test bench cost compare fuzz lint fmt-check clippy unit build clean vm-test vm-bench

all: build

## deps: install what a fresh Debian machine lacks (apt-get as root; otherwise say what is missing)
deps:
	@./tools/deps.sh $(DEB_PACKAGES)

build: deps
	$(CARGO) build --release --workspace

## run: the main job: an in-process server (a pinned worker) and client on the soft fabric,
## a short benchmark of each message form with a progress display, then the summary
run: build
	@echo "== rpcrdma bench rpc: server worker and client pinned to two cores, soft fabric"
	@$(RPCRDMA) bench rpc --workload null,echo:1k,write:4k,read:4k,write:64k,read:64k --seconds 1
	@echo "== null RPCs with 32 calls in flight"
	@$(RPCRDMA) bench rpc --workload null --depth 32 --seconds 1
	@echo "== the protocol analyser on a Long Call header (rpcrdma decode)"
	@$(RPCRDMA) demo long-call | $(RPCRDMA) decode

## test: everything CI runs: formatting, lints, unit/property/black-box tests, and the
## verbs provider on soft-RoCE in a QEMU guest when this machine can run one (it says so
## plainly when it cannot)
test: deps lint unit cost
	@tools/rxe-vm/vm-test.sh --if-possible test

## cost: instructions per RPC of every message form (callgrind), checked against the
## figures committed in bench/cost-figures.json: fails when a form grew more than 3%
cost: build
	$(RPCRDMA) bench cost --check bench/cost-figures.json

unit:
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

lint: fmt-check clippy

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: protocol codec speed against a same-run memcpy; fabric latency against a same-run
## cache-line ping-pong between the same two cores
bench: build
	$(RPCRDMA) bench cost
	$(RPCRDMA) bench proto
	$(RPCRDMA) bench fabric --op send --size 8,64,512,4096,65536
	$(RPCRDMA) bench fabric --op write --size 8,64,512,4096,65536
	$(RPCRDMA) bench fabric --op read --size 8,64,512,4096,65536
	$(RPCRDMA) bench rpc --workload null --depth 1 --seconds 2
	$(RPCRDMA) bench rpc --workload null --depth 32 --seconds 2
	$(RPCRDMA) bench rpc --workload write:4k,read:4k,write:64k,read:64k --depth 1 --seconds 2

## compare: a null RPC's round trip beside independent transports measured in the same
## rounds: the cache-line ping-pong, UCX's shared-memory tag ping-pong, TCP over loopback
compare: build
	tools/compare.sh $(or $(ROUNDS),5)

## vm-test: the verbs provider on soft-RoCE in a QEMU guest (builds the guest image from
## Debian packages on first use; needs root for that)
vm-test: deps
	tools/rxe-vm/vm-test.sh test

## vm-bench: fabric latency on soft-RoCE in the guest, beside perftest's ib_*_lat
vm-bench: deps
	tools/rxe-vm/vm-test.sh bench

## fuzz: every decoder's cargo-fuzz target for FUZZ_SECONDS each (not part of `make test`)
fuzz: deps
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@cd fuzz && for t in $$(RUSTC_BOOTSTRAP=1 $(CARGO) fuzz list); do \
		echo "== fuzz $$t for $(FUZZ_SECONDS)s"; \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 || exit 1; \
	done

clean:
	$(CARGO) clean
