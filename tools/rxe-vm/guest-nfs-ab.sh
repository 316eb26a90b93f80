#!/bin/bash
# guest-nfs-ab.sh: a tuning job INSIDE the guest: the kernel's NFS client on the kernel's
# nfsd and on nfs3d variants, rounds alternated, medians printed (these hosts change speed
# within a minute: only same-run ratios mean something). Run from the host, e.g.:
#
#   tools/rxe-vm/run.sh --image target/rxe-vm --timeout 1900 --mem 3G \
#     --bin target/release/examples/nfs3d --bin /tmp/nfs3d-old \
#     --bin target/release/examples/nfs3probe --bin tools/rxe-vm/guest-lib.sh \
#     --bin tools/rxe-vm/guest-nfs.sh --bin tools/rxe-vm/guest-nfs-ab.sh \
#     --env AB_ROUNDS=3 --env "AB_VARIANTS=nfs3d nfs3d-old nfs3d+io1" \
#     --env "ARGS_nfs3d_io1=--io-threads 1" -- guest-nfs-ab.sh
#
# A variant is a binary on the guest's PATH, optionally `+name`d; its extra options come
# from ARGS_<variant with - and + as _>. Each round: mount, dd of 64 MiB written (fsync) and
# read back after dropping caches, tree copy and sync, diff -r after
# dropping caches, rm -r, 2,000 files made with touch, ls of them after dropping caches,
# umount, then 3,000 GETATTRs of the root and 1,000 CREATEs and REMOVEs from the engine's
# requester (nfs3probe). AB_RTT_ONLY=1 leaves out the client's steps between mount and
# umount (a quick look at round trips).
PROG=nfs-ab; WORK=$(mktemp -d); PORT=18515; IP=10.0.2.15
. "$(dirname "$0")/guest-lib.sh"
. "$(dirname "$0")/guest-nfs.sh"
ROUNDS=${AB_ROUNDS:-3}
VARIANTS=${AB_VARIANTS:-nfs3d}
STEPS="mount dd-write-64m dd-read-64m tree-copy tree-diff tree-remove create-2000 list-2000 umount getattr-rtt-p50-us create-rtt-p50-us remove-rtt-p50-us"

start_variant() { # VARIANT
    local v=$1 var="ARGS_${1//[-+]/_}"
    local -a extra
    read -r -a extra <<<"${!var:-}"
    rm -rf "${NEXPORT:?}"/*
    nfs3d_start "${v%%+*}" "$v" "${extra[@]}"
}

workload() { # SERVER PORT MOUNTPORT REMOTE
    local s=$1 port=$2 mport=$3 remote=$4
    timed "$s" mount mount -t nfs -o "vers=3,proto=rdma,port=$port,mountport=$mport,mountproto=tcp,nolock" \
        "$IP:$remote" "$MNT" || return 1
    [ -n "${AB_RTT_ONLY:-}" ] || client_steps "$s"
    timed "$s" umount umount "$MNT"
    rtts "$@"
}

client_steps() { # SERVER: the kernel client's steps on the mounted export
    local s=$1
    timed "$s" dd-write-64m dd if="$NFS_WORK/big" of="$MNT/big" bs=1M conv=fsync status=none
    drop_caches
    timed "$s" dd-read-64m dd if="$MNT/big" of=/dev/null bs=1M status=none
    rm -f "$MNT/big"
    timed "$s" tree-copy bash -c "cp -a '$NFS_WORK/tree' '$MNT/tree' && sync"
    drop_caches
    timed "$s" tree-diff diff -qr "$NFS_WORK/tree" "$MNT/tree"
    timed "$s" tree-remove rm -rf "$MNT/tree"
    mkdir "$MNT/many"
    timed "$s" create-2000 bash -c "cd '$MNT/many' && seq -f 'entry-%04g' 2000 | xargs touch"
    drop_caches
    timed "$s" list-2000 bash -c "ls '$MNT/many' >/dev/null"
    rm -rf "$MNT/many"
}

rtts() { # SERVER PORT MOUNTPORT REMOTE
    local s=$1 port=$2 mport=$3 remote=$4 out p50 k
    rtt "$s" getattr-rtt-p50-us GETATTR --server "$IP" --port "$port" --mountport "$mport" \
        --export "$remote" --getattr-bench 3000
    # CREATE and REMOVE round trips (procedures nfs3d hands to its I/O threads).
    if out=$(timeout 300 nfs3probe --server "$IP" --port "$port" --mountport "$mport" \
        --export "$remote" --create-bench 1000 2>&1); then
        echo "$s: $out"
        for k in create remove; do
            p50=$(sed -n "s/.*\"${k}_rtt_ns\":{[^}]*\"p50\":\([0-9]*\).*/\1/p" <<<"$out")
            [ -n "$p50" ] && echo "{\"server\":\"$s\",\"step\":\"$k-rtt-p50-us\",\"seconds\":$(awk -v v="$p50" 'BEGIN { printf "%.3f", v / 1000 }'),\"ok\":true}" \
                >>"$NFS_WORK/times.jsonl"
        done
        pass "$s: CREATE and REMOVE round trips from the engine"
    else
        echo "$out"
        fail "$s: CREATE and REMOVE round trips from the engine"
    fi
}

nfs_setup || { fail "nfs setup"; exit 1; }
kernel_nfsd_start || { fail "kernel nfsd start"; exit 1; }
# The servers take turns at going first, each round starting one place further down the
# list: with a fixed order, the server in second place was slower on the tree copy by up to
# 25% in three runs, whichever server held that place.
read -r -a ORDER <<<"kernel-nfsd $VARIANTS"
for ((r = 1; r <= ROUNDS; r++)); do
    banner "round $r of $ROUNDS"
    for ((k = 0; k < ${#ORDER[@]}; k++)); do
        v=${ORDER[$(((r - 1 + k) % ${#ORDER[@]}))]}
        if [ "$v" = kernel-nfsd ]; then
            workload kernel-nfsd 20049 20048 "$KEXPORT"
        elif start_variant "$v"; then
            workload "$v" 20050 20058 /
            nfs3d_stop
        else
            fail "$v start"
        fi
    done
done
kernel_nfsd_stop
banner "medians of $ROUNDS rounds (seconds; round trips in ms), each over the kernel's"
for st in $STEPS; do
    k=$(nfs_time kernel-nfsd "$st")
    line=$(printf "%-20s kernel-nfsd %8.3f" "$st" "${k:-0}")
    for v in $VARIANTS; do
        n=$(nfs_time "$v" "$st")
        line+=$(awk -v v="$v" -v n="${n:-0}" -v k="${k:-0}" 'BEGIN { printf "   %s %8.3f (%.2f)", v, n, (k > 0 ? n / k : 0) }')
    done
    echo "$line"
done
[ "$failed" -eq 0 ]
