#!/bin/bash
# two-host.sh: rpcrdma between two soft-RoCE guests joined by a private Ethernet
# link (QEMU datagram sockets on the host's loopback between the two emulators):
# `rpcrdma serve` in one guest, `call`, `sweep` and `bench rpc` (a fault run too)
# in the other (guest-two-host.sh). Needs the image (build-image.sh) and a release
# `rpcrdma`; vm-test.sh runs it after the one-guest tests.
#
# Environment: RXE_VM_IMAGE (default target/rxe-vm), TWO_HOST_TIMEOUT (seconds
# for the client guest, default 900), RPCRDMA (the binary, default
# target/release/rpcrdma). Exits with the client guest's status.

set -uo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${RXE_VM_IMAGE:-$REPO/target/rxe-vm}
BIN=${RPCRDMA:-${CARGO_TARGET_DIR:-$REPO/target}/release/rpcrdma}
TIMEOUT=${TWO_HOST_TIMEOUT:-900}
[ -x "$BIN" ] || { echo "two-host: no $BIN (cargo build --release -p rpcrdma-tools)" >&2; exit 125; }

# Two UDP ports on the host's loopback, one per end of the link.
PA=$((30000 + RANDOM % 20000))
PB=$((PA + 1))
SERVER_LOG=$(mktemp "${TMPDIR:-/tmp}/two-host-server.XXXXXX")
COMMON=(--image "$IMAGE" --mem 1536M --bin "$BIN" --bin "$HERE/guest-two-host.sh"
        --bin "$HERE/guest-lib.sh")

"$HERE/run.sh" "${COMMON[@]}" --timeout $((TIMEOUT + 120)) \
    --link "$PA:$PB:52:54:00:77:00:01" -- guest-two-host.sh server >"$SERVER_LOG" 2>&1 &
SERVER=$!
stop_server() {
    if kill -0 "$SERVER" 2>/dev/null; then
        kill -TERM "$SERVER" 2>/dev/null
        wait "$SERVER" 2>/dev/null
    fi
}
trap 'stop_server; rm -f "$SERVER_LOG"' EXIT

rc=0
"$HERE/run.sh" "${COMMON[@]}" --timeout "$TIMEOUT" \
    --link "$PB:$PA:52:54:00:77:00:02" -- guest-two-host.sh client || rc=$?
stop_server
if [ "$rc" -ne 0 ]; then
    echo "two-host: the client guest exited with $rc; the server guest said:" >&2
    tail -n 40 "$SERVER_LOG" >&2
fi
exit "$rc"
