#!/bin/bash
# guest-nfs-listops.sh: a tuning job INSIDE the guest: what the kernel's NFS client sends
# for `ls` of a 2,000-entry directory (after dropping caches), and how long each kind of
# operation took, on the kernel's nfsd and on nfs3d: the difference of the client's
# per-operation counters (/proc/self/mountstats: operations, bytes sent and received, and
# milliseconds queued, in round trips, and in all) around the `ls`. Run from the host:
#
#   tools/rxe-vm/run.sh --image target/rxe-vm --timeout 800 --mem 3G \
#     --bin target/release/examples/nfs3d --bin tools/rxe-vm/guest-lib.sh \
#     --bin tools/rxe-vm/guest-nfs.sh --bin tools/rxe-vm/guest-nfs-listops.sh \
#     --env LISTOPS_ROUNDS=2 -- guest-nfs-listops.sh
PROG=nfs-listops; WORK=$(mktemp -d); IP=10.0.2.15
. "$(dirname "$0")/guest-lib.sh"
. "$(dirname "$0")/guest-nfs.sh"

# The per-operation lines of the mount on $MNT.
ops() {
    awk -v m="$MNT" '$0 ~ "mounted on " m " " { f = 1 }
        f && /per-op statistics/ { p = 1; next }
        f && p && NF == 0 { exit }
        f && p { print }' /proc/self/mountstats
}

listing() { # SERVER PORT MOUNTPORT REMOTE
    mount -t nfs -o "vers=3,proto=rdma,port=$2,mountport=$3,mountproto=tcp,nolock" \
        "$IP:$4" "$MNT" || return 1
    mkdir "$MNT/many"
    (cd "$MNT/many" && seq -f 'entry-%04g' 2000 | xargs touch)
    drop_caches
    ops >"$NFS_WORK/ops.before"
    local t0 t1
    t0=$(date +%s.%N)
    ls "$MNT/many" >/dev/null
    t1=$(date +%s.%N)
    ops >"$NFS_WORK/ops.after"
    echo "== $1: ls took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s"
    # Fields after the name: ops, transmissions, timeouts, bytes sent, bytes received,
    # queue ms, round-trip ms, execute ms.
    paste "$NFS_WORK/ops.before" "$NFS_WORK/ops.after" | awk '{ n = NF / 2
        if ($(n + 2) != $2)
            printf "%-12s ops %5d  sent %8d B  received %9d B  queued %5d ms  rtt %5d ms  in all %5d ms\n",
                $1, $(n + 2) - $2, $(n + 5) - $5, $(n + 6) - $6, $(n + 7) - $7, $(n + 8) - $8, $(n + 9) - $9 }'
    rm -rf "$MNT/many"
    umount "$MNT"
}

nfs_setup || { fail "nfs setup"; exit 1; }
kernel_nfsd_start || { fail "kernel nfsd start"; exit 1; }
for ((r = 1; r <= ${LISTOPS_ROUNDS:-2}; r++)); do
    listing kernel-nfsd 20049 20048 "$KEXPORT" || fail "kernel-nfsd listing"
    rm -rf "${NEXPORT:?}"/*
    if nfs3d_start nfs3d nfs3d; then
        listing nfs3d 20050 20058 / || fail "nfs3d listing"
        nfs3d_stop
    else
        fail "nfs3d start"
    fi
done
kernel_nfsd_stop
[ "${failed:-0}" -eq 0 ]
