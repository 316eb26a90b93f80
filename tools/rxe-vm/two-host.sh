#!/bin/bash
# two-host.sh: rpcrdma between two soft-RoCE guests joined by a private Ethernet
# link (a stream on a Unix socket between the two emulators: lossless, no Nagle):
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

# The link's Unix socket, in a folder of its own: the server's emulator listens on it.
LINKDIR=$(mktemp -d "${TMPDIR:-/tmp}/two-host-link.XXXXXX")
SOCK=$LINKDIR/link
SERVER_LOG=$LINKDIR/server.log
CLIENT_LOG=$LINKDIR/client.log
COMMON=(--image "$IMAGE" --mem 1536M --bin "$BIN" --bin "$HERE/guest-two-host.sh"
        --bin "$HERE/guest-lib.sh")

"$HERE/run.sh" "${COMMON[@]}" --timeout $((TIMEOUT + 120)) \
    --link "listen:$SOCK:52:54:00:77:00:01" -- guest-two-host.sh server >"$SERVER_LOG" 2>&1 &
SERVER=$!
stop_server() {
    if kill -0 "$SERVER" 2>/dev/null; then
        kill -TERM "$SERVER" 2>/dev/null
        wait "$SERVER" 2>/dev/null
    fi
}
trap 'stop_server; rm -rf "$LINKDIR"' EXIT

# QEMU 7.2's stream client does not retry: it connects once the listener is there.
for ((i = 0; i < 600; i++)); do
    [ -S "$SOCK" ] && break
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.1
done
if [ ! -S "$SOCK" ]; then
    echo "two-host: the server guest's emulator did not listen on $SOCK; it said:" >&2
    tail -n 40 "$SERVER_LOG" >&2
    exit 125
fi

# The client's output is shown as it comes and kept, so that a failure's own lines
# can be repeated last, where a log cut to its tail (CI's) still shows them.
"$HERE/run.sh" "${COMMON[@]}" --timeout "$TIMEOUT" \
    --link "connect:$SOCK:52:54:00:77:00:02" -- guest-two-host.sh client 2>&1 | tee "$CLIENT_LOG"
rc=${PIPESTATUS[0]}
stop_server
if [ "$rc" -ne 0 ]; then
    {
        echo "two-host: the client guest exited with $rc; the server guest said:"
        tail -n 40 "$SERVER_LOG"
        echo "two-host: the client guest's failed checks (each with what follows it):"
        grep -A 25 ': FAIL ' "$CLIENT_LOG" || echo "(none: the guest stopped before its checks ended)"
        echo "two-host: the client guest's last lines:"
        tail -n 15 "$CLIENT_LOG"
    } >&2
fi
exit "$rc"
