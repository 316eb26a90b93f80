#!/bin/bash
# guest-mount-phases.sh: a guest job for run.sh that splits the kernel client's NFSv3 mount
# into its phases, from the kernel's own trace events (sunrpc, rpcrdma), on the kernel's
# nfsd and on nfs3d builds, in alternated rounds:
#   MOUNT    the MOUNT exchange over TCP (mountv3 NULL to the transport's destruction)
#   connect  the RDMA connect (xprtrdma_op_connect to xprtrdma_connect)
#   Calls    the mount's first NFS Calls, and each one's round trip (marshal to receive)
# with nfs3d's accept time from its log. Run from the repository:
#
#   tools/rxe-vm/run.sh --mem 3G --bin target/release/examples/nfs3d \
#       [--bin OTHER_BUILD_NAMED_nfs3d-base] --bin tools/rxe-vm/guest-lib.sh \
#       --bin tools/rxe-vm/guest-nfs.sh --bin tools/rxe-vm/guest-mount-phases.sh \
#       --env PHASE_VARIANTS="nfs3d nfs3d-base" --env PHASE_MODE=fresh \
#       -- guest-mount-phases.sh
#
# PHASE_VARIANTS: nfs3d binaries on PATH (default nfs3d); PHASE_MODE: "fresh" starts each
# variant afresh for each mount (its first client), "running" starts one of the first
# variant before the rounds and mounts it again and again, as the kernel's nfsd is always
# running; PHASE_ROUNDS (default 5). One line per mount:
#   ROUND r SERVER mount S s; mountd MS connect MS calls MS total MS; each: MS...; accept MS

set -u
PROG=mount-phases
WORK=$(mktemp -d)
# shellcheck source=guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"
# shellcheck source=guest-nfs.sh
. "$(dirname "$0")/guest-nfs.sh"

VARIANTS=${PHASE_VARIANTS:-nfs3d}
MODE=${PHASE_MODE:-fresh}
ROUNDS=${PHASE_ROUNDS:-5}
T=/sys/kernel/tracing

nfs_setup || { fail "nfs setup"; exit 1; }
kernel_nfsd_start || { fail "kernel nfsd start"; exit 1; }
mountpoint -q "$T" || mount -t tracefs nodev "$T" || { fail "tracefs"; exit 1; }
echo 8192 >"$T/buffer_size_kb"

# The phases of the mount traced in $T/trace, in ms.
phases() {
    grep -v '^#' "$T/trace" | awk '
        { ts = $4; sub(":", "", ts); ts += 0 }
        /rpc_request:.*mountv3 NULL/ && !m0 { m0 = ts }
        /xprt_destroy/ && !m1 { m1 = ts }
        /xprtrdma_op_connect/ && !c0 { c0 = ts }
        /xprtrdma_connect:/ && !c1 { c1 = ts }
        /xprtrdma_marshal/ { mk = ts }
        /xprtrdma_wc_receive/ { last = ts; each = each sprintf(" %.1f", (ts - mk) * 1000) }
        END { printf "mountd %.1f connect %.1f calls %.1f total %.1f ms; each:%s",
              (m1 - m0) * 1000, (c1 - c0) * 1000, (last - c1) * 1000, (last - m0) * 1000, each }'
}

# One traced mount and umount of SERVER (kernel-nfsd or an nfs3d variant) in round R.
traced_mount() { # R SERVER
    local r=$1 v=$2 t m accept=
    if [ "$v" != kernel-nfsd ] && [ "$MODE" = fresh ]; then
        nfs3d_start "$v" nfs3d-phases || { fail "$v start"; return; }
    fi
    mount_cmd "$v"
    echo >"$T/trace"
    echo 1 >"$T/events/sunrpc/enable"
    echo 1 >"$T/events/rpcrdma/enable"
    echo 1 >"$T/tracing_on"
    t=$(now)
    timeout 60 "${MOUNT_CMD[@]}" || fail "round $r: mount of $v"
    m=$(since "$t")
    echo 0 >"$T/tracing_on"
    timeout 60 umount "$MNT"
    if [ "$v" != kernel-nfsd ]; then
        [ "$MODE" = fresh ] && nfs3d_stop
        accept=$(grep 'accepted a connection' "$NFS_WORK/nfs3d-phases.err" | tail -n 1 | accept_ms)
    fi
    echo "ROUND $r $v mount $m s; $(phases)${accept:+; accept $accept}"
}

if [ "$MODE" = running ]; then
    first=${VARIANTS%% *}
    VARIANTS=$first
    nfs3d_start "$first" nfs3d-phases || { fail "$first start"; exit 1; }
    # Its first mount, not counted: what a running server has already done.
    untimed_mount nfs3d
fi
read -r -a servers <<<"kernel-nfsd $VARIANTS"
for ((r = 1; r <= ROUNDS; r++)); do
    # Each round starts one place further along the list.
    for ((i = 0; i < ${#servers[@]}; i++)); do
        traced_mount "$r" "${servers[$(((i + r) % ${#servers[@]}))]}"
    done
done
[ "$MODE" = running ] && nfs3d_stop
kernel_nfsd_stop
echo "mount-phases: done"
