#!/bin/bash
# vm-test.sh [--if-possible] [test|bench]
#
# Runs rpcrdma on real verbs: builds the release `rpcrdma` binary, builds (or
# reuses) the soft-RoCE guest image (build-image.sh), boots it and runs
# guest-vm-test.sh there: `test` (the default) runs the fabric conformance suite
# on the verbs provider against rxe0; `bench` measures the fabric beside
# perftest. Exits with the guest's code (run.sh's: 124 timeout, 125 harness
# failure).
#
# With --if-possible (what `make test` uses) a machine that cannot run the guest
# (not root and the image's packages missing, or no way to get them) is reported
# plainly and the script exits 0 instead of failing.
#
# `test` then runs two-host.sh: `rpcrdma serve` in one guest and `call`, `sweep`
# and `bench rpc` in a second one, over a private link between them
# (VM_TEST_TWO_HOST=0 skips it).
#
# Environment: RXE_VM_IMAGE (image folder, default target/rxe-vm),
# VM_TEST_TIMEOUT (seconds for the guest run, default 2400), NFS_ROUNDS (rounds of
# the NFS workload on each server, alternating; the table gives medians; default 1),
# VM_TEST_SUITES (0 skips cthon04, pjdfstest and the identity checks), NFS3D_SUITE_ARGS
# (nfs3d's options for the suites; default --no-root-squash),
# BENCH_ROUNDS, BENCH_ITERS, BENCH_OPS and BENCH_SIZES (`bench`: rounds, iterations, the
# operations and the sizes, space-separated), CARGO.

set -euo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${RXE_VM_IMAGE:-$REPO/target/rxe-vm}
CARGO=${CARGO:-cargo}

IF_POSSIBLE=0
if [ "${1:-}" = "--if-possible" ]; then IF_POSSIBLE=1; shift; fi
MODE=${1:-test}
case "$MODE" in test|bench) ;; *) echo "usage: $0 [--if-possible] [test|bench]" >&2; exit 2 ;; esac

skip() {
    echo "vm-test: SKIPPED, $*" >&2
    echo "vm-test: the verbs provider was NOT tested on soft-RoCE on this machine" >&2
    exit 0
}

if [ "$IF_POSSIBLE" = 1 ]; then
    if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
        skip "the guest image is for Linux on x86_64"
    fi
    if [ "$(id -u)" -ne 0 ] && ! command -v qemu-system-x86_64 >/dev/null; then
        skip "qemu-system-x86_64 is not installed and installing it needs root (run as root, or: sudo tools/rxe-vm/build-image.sh $IMAGE)"
    fi
    if [ "$(id -u)" -ne 0 ] && ! command -v apt-get >/dev/null && [ ! -f "$IMAGE/initrd.cpio" ]; then
        skip "no image in $IMAGE and no apt-get to build one"
    fi
fi

t0=$EPOCHREALTIME
secs() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }

echo "vm-test: building rpcrdma, nfs3d and the probes (release)" >&2
(cd "$REPO" && "$CARGO" build --release --quiet -p rpcrdma-tools \
    && "$CARGO" build --release --quiet -p rpcrdma-engine --example nfs3d --example nfs3probe \
        --example nfs4probe --example nfs4d)
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/rpcrdma
NFS3D=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/nfs3d
NFS3PROBE=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/nfs3probe
NFS4PROBE=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/nfs4probe
NFS4D=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/nfs4d

echo "vm-test: building or reusing the guest image in $IMAGE" >&2
rc=0
"$HERE/build-image.sh" "$IMAGE" || rc=$?
if [ "$rc" -eq 3 ] && [ "$IF_POSSIBLE" = 1 ]; then
    skip "the guest image needs Debian packages and this user cannot install them (not root)"
fi
[ "$rc" -eq 0 ] || { echo "vm-test: image build failed ($rc)" >&2; exit "$rc"; }

echo "vm-test: image ready after $(secs) s; booting the guest ($MODE)" >&2
# The guest's output is shown as it comes and kept, so that its failed checks can be
# repeated at the very end, where a log cut to its tail (CI's) still shows them.
GUEST_LOG=$(mktemp "${TMPDIR:-/tmp}/vm-test-guest.XXXXXX")
trap 'rm -f "$GUEST_LOG"' EXIT
SUITE_ENV=(--env "NFS_SUITES=${VM_TEST_SUITES:-1}")
# Passed on only when set (empty included: nfs3d's defaults).
[ -z "${NFS3D_SUITE_ARGS+set}" ] || SUITE_ENV+=(--env "NFS3D_SUITE_ARGS=$NFS3D_SUITE_ARGS")
rc=0
"$HERE/run.sh" --image "$IMAGE" --timeout "${VM_TEST_TIMEOUT:-2400}" \
    --mem 3G --bin "$BIN" --bin "$NFS3D" --bin "$NFS3PROBE" --bin "$NFS4PROBE" --bin "$NFS4D" \
    --bin "$HERE/guest-vm-test.sh" --bin "$HERE/guest-lib.sh" \
    --bin "$HERE/guest-nfs.sh" --bin "$HERE/guest-nfs-suites.sh" "${SUITE_ENV[@]}" \
    --env "NFS_ROUNDS=${NFS_ROUNDS:-1}" \
    --env "ROUNDS=${BENCH_ROUNDS:-3}" --env "ITERS=${BENCH_ITERS:-5000}" \
    --env "OPS=${BENCH_OPS:-send write read}" --env "SIZES=${BENCH_SIZES:-8 64 512 4096 65536}" \
    -- guest-vm-test.sh "$MODE" 2>&1 | tee "$GUEST_LOG" || rc=${PIPESTATUS[0]}
echo "vm-test: $MODE finished after $(secs) s with exit code $rc" >&2
if [ "$MODE" = test ] && [ "${VM_TEST_TWO_HOST:-1}" = 1 ]; then
    # Two guests, each with its own soft-RoCE device, joined by a private link:
    # `serve` in one, `call`, `sweep` and `bench rpc` in the other.
    echo "vm-test: two hosts: serve in one guest, call/sweep/bench rpc from another" >&2
    two=0
    RXE_VM_IMAGE="$IMAGE" RPCRDMA="$BIN" "$HERE/two-host.sh" || two=$?
    echo "vm-test: two hosts finished after $(secs) s with exit code $two" >&2
    [ "$rc" -ne 0 ] || rc=$two
fi
if [ "$rc" -ne 0 ] && grep -q ': FAIL ' "$GUEST_LOG"; then
    echo "vm-test: the one-guest run's failed checks (two-host.sh reports its own above):" >&2
    grep ': FAIL ' "$GUEST_LOG" >&2
fi
exit "$rc"
