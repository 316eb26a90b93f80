#!/bin/bash
# selftest.sh [OUTDIR]
#
# Builds (or reuses) the rxe-vm image in OUTDIR (default: $RXE_VM_IMAGE, else
# <repo>/target/rxe-vm) and checks soft-RoCE in the guest with
# guest-selftest.sh: ibv_devices lists rxe0, ibv_devinfo -d rxe0 shows an
# active port, an ibv_rc_pingpong server/client pair over GID index 1, and
# perftest's ib_send_lat (64 B, 1000 iterations). Exits non-zero on any failure
# (run.sh's code: 124 timeout, 125 harness failure, 1 a check failed).

set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-${RXE_VM_IMAGE:-$REPO/target/rxe-vm}}

secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

t=$EPOCHREALTIME
"$HERE/build-image.sh" "$OUT"
echo "selftest: image ready in $(secs_since "$t") s" >&2

t=$EPOCHREALTIME
rc=0
"$HERE/run.sh" --verbose --image "$OUT" --timeout "${RXE_VM_TIMEOUT:-600}" \
    --bin "$HERE/guest-selftest.sh" --bin "$HERE/guest-lib.sh" -- guest-selftest.sh || rc=$?
echo "selftest: guest run took $(secs_since "$t") s, exit code $rc" >&2
exit "$rc"
