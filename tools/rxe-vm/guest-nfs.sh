#!/bin/bash
# guest-nfs.sh: the NFS part of vm-test, sourced by guest-vm-test.sh INSIDE the guest
# (pass, fail, banner from guest-lib.sh). The Linux kernel is the peer that proves the
# engine: its NFS client mounts nfs3d (the engine's NFSv3 server) over RPC-over-RDMA and
# runs a workload, and the same workload runs against the kernel's own nfsd as the
# reference, in the same guest. Every timed step prints one JSON line:
#   {"server":"nfs3d"|"kernel-nfsd","step":"dd-write-64m","seconds":1.234}
# nfs3d's counters must show Read chunks, Write chunks, Reply chunks and remote
# invalidations.

IP=${IP:-10.0.2.15}
NFS_WORK=/tmp/nfs-work
# Server-side exports (tmpfs) and the client's mount point.
KEXPORT=/export-kernel
NEXPORT=/export-nfs3d
MNT=/mnt/nfs

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
# Seconds a timed step may take before it fails (the whole workload stays bounded).
STEP_LIMIT=${STEP_LIMIT:-240}
timed() { # SERVER STEP CMD... : runs CMD, prints its time as JSON; its status is returned
    local server=$1 step=$2 t rc
    shift 2
    t=$(now)
    timeout -s KILL "$STEP_LIMIT" "$@"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "step $step of $server exited $rc; the kernel says:" >&2
        dmesg | tail -n 15 >&2
    fi
    echo "{\"server\":\"$server\",\"step\":\"$step\",\"seconds\":$(since "$t"),\"ok\":$([ "$rc" -eq 0 ] && echo true || echo false)}" \
        | tee -a "$NFS_WORK/times.jsonl"
    return "$rc"
}
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# rxe0's receiver-not-ready counters (both ends of every connection here are on rxe0):
# RNR NAKs sent (a Send found no receive posted), received, and retries exhausted.
RNR_COUNTERS="send_rnr_err rcvd_rnr_err retry_rnr_exceeded_err"
rnr_counts() {
    local c
    for c in $RNR_COUNTERS; do
        printf '%s=%s ' "$c" "$(cat "/sys/class/infiniband/rxe0/ports/1/hw_counters/$c" 2>/dev/null || echo 0)"
    done
}
# Passes NAME when the counters did not move since BEFORE (rnr_counts' output).
rnr_check() { # NAME BEFORE
    local after
    after=$(rnr_counts)
    if [ "$after" = "$2" ]; then
        pass "$1: no RNR (rxe0's counters unchanged: $after)"
    else
        fail "$1: RNR (rxe0 before: $2; after: $after)"
    fi
}

nfs_setup() {
    mkdir -p "$NFS_WORK" "$MNT" "$KEXPORT" "$NEXPORT" /var/lib/nfs /run/rpcbind
    : >"$NFS_WORK/times.jsonl"
    modprobe -a sunrpc rpcrdma nfs nfsv3 nfsd || return 1
    grep -q ' /proc/fs/nfsd ' /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd || return 1
    mount -t tmpfs -o size=700m tmpfs "$KEXPORT" || return 1
    mount -t tmpfs -o size=700m tmpfs "$NEXPORT" || return 1
    # The workload's data, made once, outside the timed steps: 64 MiB of random bytes and
    # a tree of 40 directories of 25 files (1,040 objects) of varied sizes.
    head -c $((64 << 20)) /dev/urandom >"$NFS_WORK/big" || return 1
    sha256sum <"$NFS_WORK/big" | cut -d' ' -f1 >"$NFS_WORK/big.sha"
    local d f
    for d in $(seq 40); do
        mkdir -p "$NFS_WORK/tree/d$d"
        for f in $(seq 25); do
            head -c $(((d * 25 + f) * 37 % 9000)) /dev/urandom >"$NFS_WORK/tree/d$d/f$f"
        done
    done
}

kernel_nfsd_start() {
    echo "$KEXPORT *(rw,no_root_squash,no_subtree_check,insecure,fsid=0)" >/etc/exports
    # NFSv4's grace period after a start, 90 s by default, shortened so that the NFSv4.1
    # probe's OPEN is not refused with NFS4ERR_GRACE for long (set before nfsd starts).
    echo 10 >/proc/fs/nfsd/nfsv4gracetime 2>/dev/null
    # And lockd's (50 s by default), during which nfsd grants no delegation.
    echo 10 >/proc/sys/fs/nfs/nlm_grace_period 2>/dev/null
    rpcbind -w 2>/dev/null || rpcbind || return 1
    exportfs -ra || return 1
    rpc.mountd -p 20048 || return 1
    rpc.nfsd 4 || return 1
    echo "rdma 20049" >/proc/fs/nfsd/portlist || return 1
}

kernel_nfsd_stop() {
    rpc.nfsd 0
    exportfs -ua
    killall rpc.mountd 2>/dev/null
}

NFS3D_PID=
# The export options nfs3d runs the workload with: as the kernel's export above
# (no_root_squash: the workload runs as root). Empty: nfs3d's defaults (root squashed).
NFS3D_EXPORT_OPTS=${NFS3D_EXPORT_OPTS---no-root-squash}
# Starts nfs3d (or the binary BIN) on port 20050, MOUNT on 20058; its output goes to
# $NFS_WORK/NAME.out and .err, its state to $NFS_WORK/NAME-state. More options: ARGS, or
# NFS3D_ARGS split on spaces (tuning runs), after $NFS3D_EXPORT_OPTS.
nfs3d_start() { # [BIN [NAME [ARGS...]]]
    local bin=${1:-nfs3d} name=${2:-nfs3d}
    local -a extra opts
    read -r -a opts <<<"$NFS3D_EXPORT_OPTS"
    if [ $# -gt 2 ]; then
        extra=("${@:3}")
    else
        read -r -a extra <<<"${NFS3D_ARGS:-}"
    fi
    extra=("${opts[@]}" "${extra[@]}")
    "$bin" --export "$NEXPORT" --provider verbs --device rxe0 --listen "$IP:20050" \
        --mountd-port 20058 --workers 1 --state-dir "$NFS_WORK/$name-state" --no-rpcbind \
        --stats-every "${NFS3D_STATS_EVERY:-0}" "${extra[@]}" \
        >"$NFS_WORK/$name.out" 2>"$NFS_WORK/$name.err" &
    NFS3D_PID=$!
    wait_listen 20058 || { cat "$NFS_WORK/$name.err"; return 1; }
}

# Stops the server PID: SIGTERM (it prints its counters), SIGKILL after 10 s.
stop_server() { # PID
    [ -n "$1" ] || return 1
    kill -TERM "$1"
    for _ in $(seq 100); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null
    wait "$1"
}

nfs3d_stop() { stop_server "$NFS3D_PID"; }

# The counter NAME of the first object named SECTION in nfs3d's final JSON line.
nfs3d_counter() { # SECTION NAME
    tail -n 1 "$NFS_WORK/nfs3d.out" | grep -o "\"$1\":{[^}]*" | grep -o "\"$2\":[0-9]*" \
        | head -n 1 | cut -d: -f2
}

# The kernel client's workload on a server: SERVER label, PORT, MOUNTPORT, the server's
# export path as MOUNT knows it, the exported directory here (to compare), whether a
# hard link must succeed (yes: both servers make them) or be refused, and the mount
# options (default: NFSv3 with MOUNT over TCP on MOUNTPORT, without NLM).
client_workload() { # SERVER PORT MOUNTPORT REMOTE LOCAL LINK(yes|no) [OPTIONS]
    local s=$1 port=$2 mport=$3 remote=$4 local_dir=$5 link=$6 got n
    local opts=${7:-vers=3,proto=rdma,port=$port,mountport=$mport,mountproto=tcp,nolock}
    if timed "$s" mount mount -t nfs -o "$opts" "$IP:$remote" "$MNT"; then
        pass "$s: mount ($(awk -v m="$MNT" '$2 == m { print $4 }' /proc/mounts | grep -o 'vers=[0-9.]*'))"
    else
        fail "$s: mount"
        dmesg | tail -n 20
        return 1
    fi
    # 64 MiB written with dd (fsync), read back after the caches are dropped.
    if timed "$s" dd-write-64m dd if="$NFS_WORK/big" of="$MNT/big" bs=1M conv=fsync status=none; then
        pass "$s: dd write 64 MiB"
    else
        fail "$s: dd write 64 MiB"
    fi
    drop_caches
    timed "$s" dd-read-64m dd if="$MNT/big" of="$NFS_WORK/big.back" bs=1M status=none
    got=$(sha256sum <"$NFS_WORK/big.back" | cut -d' ' -f1)
    if [ "$got" = "$(cat "$NFS_WORK/big.sha")" ]; then pass "$s: 64 MiB read back equal"; else fail "$s: 64 MiB read back differs"; fi
    got=$(sha256sum <"$local_dir/big" | cut -d' ' -f1)
    if [ "$got" = "$(cat "$NFS_WORK/big.sha")" ]; then pass "$s: the exported file is equal"; else fail "$s: the exported file differs"; fi
    rm -f "$NFS_WORK/big.back"
    # A tree of 1,040 files and directories: copied in, compared, renamed, removed.
    if timed "$s" tree-copy cp -a "$NFS_WORK/tree" "$MNT/tree" && sync; then pass "$s: tree copied"; else fail "$s: tree copy"; fi
    drop_caches
    if timed "$s" tree-diff diff -r "$NFS_WORK/tree" "$MNT/tree"; then pass "$s: tree equal"; else fail "$s: tree differs"; fi
    if diff -r "$NFS_WORK/tree" "$local_dir/tree" >/dev/null; then pass "$s: exported tree equal"; else fail "$s: exported tree differs"; fi
    if mv "$MNT/tree" "$MNT/tree2" && [ -d "$MNT/tree2/d7" ] && [ ! -e "$MNT/tree" ]; then pass "$s: tree renamed"; else fail "$s: tree rename"; fi
    if timed "$s" tree-remove rm -rf "$MNT/tree2" && [ ! -e "$local_dir/tree2" ]; then pass "$s: tree removed"; else fail "$s: tree remove"; fi
    # A symbolic link is made and read back (never followed by the server).
    if ln -s /etc/passwd "$MNT/link" && [ "$(readlink "$MNT/link")" = /etc/passwd ] \
        && [ "$(readlink "$local_dir/link")" = /etc/passwd ]; then
        pass "$s: symlink"
    else
        fail "$s: symlink"
    fi
    # A hard link.
    if ln "$MNT/big" "$MNT/hard" 2>"$NFS_WORK/ln.err"; then
        if [ "$link" = yes ]; then pass "$s: hard link made"; else fail "$s: hard link made (must be refused)"; fi
    else
        if [ "$link" = no ]; then pass "$s: hard link refused ($(head -c 80 "$NFS_WORK/ln.err"))"; else fail "$s: hard link refused"; fi
    fi
    # A directory of 2,000 entries, listed (READDIRPLUS through the Reply chunk).
    mkdir "$MNT/many"
    timed "$s" create-2000 bash -c "cd '$MNT/many' && seq -f 'entry-%04g' 2000 | xargs touch"
    drop_caches
    n=$(timed "$s" list-2000 ls "$MNT/many" | grep -c '^entry-')
    if [ "$n" -eq 2000 ]; then pass "$s: 2000 entries listed"; else fail "$s: $n of 2000 entries listed"; fi
    rm -rf "$MNT/many" "$MNT/big" "$MNT/hard" "$MNT/link"
    if timed "$s" umount umount "$MNT"; then pass "$s: umount"; else fail "$s: umount"; fi
}

nfs_tests() {
    banner "NFS: setup (modules, exports, workload data)"
    if ! nfs_setup; then
        fail "nfs setup"
        return
    fi
    pass "nfs setup"

    banner "NFS: the kernel's client on the kernel's nfsd over RDMA (reference)"
    if [ -n "${NFS_SKIP_KERNEL:-}" ]; then
        :
    elif kernel_nfsd_start; then
        pass "kernel nfsd started"
        client_workload kernel-nfsd 20049 20048 "$KEXPORT" "$KEXPORT" yes
        if command -v nfs3probe >/dev/null; then
            # A client that asks for version 2: the kernel answers ERR_VERS, the same
            # connection goes on in version 1 and every check passes.
            probe_server kernel-nfsd 20049 20048 "$KEXPORT" "$KEXPORT" auto 1
            null_rtt kernel-nfsd 20049 20048 "$KEXPORT"
        fi
        if command -v nfs4probe >/dev/null; then
            backchannel_probe kernel-nfsd 20049 "$KEXPORT"
        fi
        sweep_null kernel-nfsd 20049
    else
        fail "kernel nfsd start"
    fi

    if command -v nfs3d >/dev/null; then
        banner "NFS: the kernel's client on nfs3d (the engine) over RDMA"
        local rnr
        rnr=$(rnr_counts)
        if nfs3d_start; then
            pass "nfs3d started"
            client_workload nfs3d 20050 20058 / "$NEXPORT" yes
            rnr_check "nfs3d under the kernel's client" "$rnr"
            if command -v nfs3probe >/dev/null; then
                # NFSv3 over RPC-over-RDMA version 2 between the engine's two ends.
                probe_server nfs3d 20050 20058 / "$NEXPORT" 2 2
                null_rtt nfs3d 20050 20058 /
            fi
            nfs3d_stop
            echo "nfs3d counters: $(tail -n 1 "$NFS_WORK/nfs3d.out")"
            local c v
            # The kernel's client asks for 128 credits and keeps many Calls in flight at
            # once; on the shared receive queue its grant starts at 8 and grows: it must
            # never be ended for holding more Calls than its grant.
            v=$(nfs3d_counter errors credit_overruns)
            if [ "${v:-x}" = 0 ]; then pass "nfs3d credit_overruns: 0"; else fail "nfs3d credit_overruns: ${v:-missing}"; fi
            if grep -qi 'overrun\|more calls than' "$NFS_WORK/nfs3d.err"; then
                grep -i 'overrun\|more calls than' "$NFS_WORK/nfs3d.err" | head -n 5
                fail "nfs3d ended a connection for exceeding its grant"
            fi
            for c in chunked_calls write_chunks long_replies remote_invalidations; do
                v=$(nfs3d_counter engine "$c")
                if [ "${v:-0}" -gt 0 ]; then pass "nfs3d $c: $v"; else fail "nfs3d $c: ${v:-missing}"; fi
            done
            # The export is a tmpfs: a memory export, whose procedures but READ and WRITE
            # ran on the worker (--memory-export auto).
            # (Named once in the counters' line; the nfs section nests objects, which
            # nfs3d_counter's pattern does not cross.)
            v=$(tail -n 1 "$NFS_WORK/nfs3d.out" | grep -o '"on_worker_jobs":[0-9]*' | cut -d: -f2)
            if [ "${v:-0}" -gt 0 ]; then pass "nfs3d on_worker_jobs: $v"; else fail "nfs3d on_worker_jobs: ${v:-missing}"; fi
        else
            fail "nfs3d start"
        fi
        tail -n 20 "$NFS_WORK/nfs3d.err"
    fi
    if command -v nfs3d >/dev/null; then
        allow_checks
    fi
    # More rounds of the same workload, alternating the servers (NFS_ROUNDS, default 1):
    # the table then gives medians, these machines being shared and noisy.
    local r
    for ((r = 2; r <= ${NFS_ROUNDS:-1}; r++)); do
        banner "NFS: round $r of ${NFS_ROUNDS}"
        if [ -z "${NFS_SKIP_KERNEL:-}" ]; then
            client_workload kernel-nfsd 20049 20048 "$KEXPORT" "$KEXPORT" yes
        fi
        if command -v nfs3d >/dev/null && nfs3d_start; then
            client_workload nfs3d 20050 20058 / "$NEXPORT" yes
            nfs3d_stop
        fi
    done
    if [ -z "${NFS_SKIP_KERNEL:-}" ] && command -v nfs3d >/dev/null; then
        mount_rounds
    fi
    if command -v nfs4d >/dev/null; then
        nfs4d_callbacks
        nfs4_workload
    fi
    kernel_nfsd_stop
    if command -v nfs3d >/dev/null && command -v nfs3probe >/dev/null; then
        many_conns
    fi

    banner "NFS: times (seconds), nfs3d over kernel nfsd (medians of ${NFS_ROUNDS:-1} round(s))"
    nfs_times_table
}

# The seconds of SERVER's STEP in the times file: the median of its rounds.
nfs_time() { # SERVER STEP
    grep "\"server\":\"$1\",\"step\":\"$2\"" "$NFS_WORK/times.jsonl" \
        | sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' | sort -n \
        | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}

nfs_times_table() {
    local st k n
    for st in mount dd-write-64m dd-read-64m tree-copy tree-diff tree-remove create-2000 \
        list-2000 umount null-rtt-p50-us getattr-rtt-p50-us; do
        k=$(nfs_time kernel-nfsd "$st")
        n=$(nfs_time nfs3d "$st")
        if [ -n "$k" ] && [ -n "$n" ]; then
            awk -v s="$st" -v k="$k" -v n="$n" 'BEGIN {
                printf "%-16s kernel-nfsd %9.3f   nfs3d %9.3f   nfs3d/kernel %5.2f\n", s, k, n, (k > 0 ? n / k : 0) }'
        fi
    done
}

# The engine's requester (nfs3probe) on a server: MOUNT, NULL, GETATTR, LOOKUP, READ of
# 1 MiB through a Write chunk, WRITE of 1 MiB through a Read chunk, READDIRPLUS of 2,000
# entries through the Reply chunk, each checked against the exported directory here.
probe_server() { # SERVER PORT MOUNTPORT REMOTE LOCAL VERSION-ASKED VERSION-EXPECTED
    local s=$1 ask=${6:-1} want=${7:-1}
    head -c $((3 << 19)) /dev/urandom >"$5/probe-data"
    mkdir -p "$5/probe-many"
    (cd "$5/probe-many" && seq -f 'p-%04g' 2000 | xargs touch)
    if timeout 120 nfs3probe --server "$IP" --port "$2" --mountport "$3" --export "$4" --local "$5" \
        --read-file probe-data --write-file probe-out --list-dir probe-many --entries 2000 \
        --version "$ask" >"$NFS_WORK/probe.log" 2>&1; then
        pass "$s: the engine's requester (nfs3probe, --version $ask): every check"
    else
        fail "$s: the engine's requester (nfs3probe, --version $ask)"
    fi
    if grep -q "RPC-over-RDMA version $want (asked $ask" "$NFS_WORK/probe.log"; then
        pass "$s: nfs3probe asked version $ask and spoke version $want"
    else
        fail "$s: nfs3probe asked version $ask, expected version $want"
    fi
    cat "$NFS_WORK/probe.log"
    rm -rf "$5/probe-data" "$5/probe-out" "$5/probe-many"
}

# The engine's requester as an NFSv4.1 client (nfs4probe) on a server: a session whose
# back channel rides the RDMA connection (RFC 8167's backward direction), a read
# delegation on a file, recalled over the back channel when a local write here breaks the
# delegation's lease: the server's CB_COMPOUND (CB_SEQUENCE, CB_RECALL) answered, the
# delegation returned, and the local write let through.
backchannel_probe() { # SERVER PORT LOCAL
    local s=$1 log="$NFS_WORK/nfs4probe.log" p t
    echo hello >"$3/cbfile"
    timeout 200 nfs4probe --server "$IP" --port "$2" --file cbfile >"$log" 2>&1 &
    p=$!
    for _ in $(seq 600); do
        grep -q "delegation held\|no delegation" "$log" && break
        kill -0 "$p" 2>/dev/null || break
        sleep 0.2
    done
    if grep -q "delegation held" "$log"; then
        t=$(now)
        timeout 100 bash -c "echo more >>'$3/cbfile'"
        echo "backchannel: the local write waited $(since "$t") s for the recall"
    fi
    if wait "$p" && grep -q '"cb_sequence":[1-9]' "$log" && grep -q '"cb_recall":[1-9]' "$log" \
        && grep -q '"returned":true' "$log" && grep -q '"credit_overruns":0' "$log"; then
        pass "$s: NFSv4.1 back channel over RDMA (nfs4probe): a delegation recalled with CB_SEQUENCE and CB_RECALL, answered"
    else
        fail "$s: NFSv4.1 back channel over RDMA (nfs4probe)"
    fi
    cat "$log"
    rm -f "$3/cbfile"
}

# nfs4d (the engine's NFSv4.1 server) calling its clients back in RFC 8167's backward
# direction: the kernel's client, whose mount opens a session with its back channel on
# the connection, and the engine's own client (nfs4probe). nfs4d sends CB_NULL and, once
# the client has used the session, CB_COMPOUND(CB_SEQUENCE); both must come back NFS4_OK.
nfs4d_callbacks() {
    banner "NFS: nfs4d's callbacks (NFSv4.1 back channel over RDMA)"
    local who out
    for who in kernel nfs4probe; do
        out="$NFS_WORK/nfs4d-$who.out"
        nfs4d --export "$NEXPORT" --listen "$IP:20051" --provider verbs --device rxe0 \
            >"$out" 2>"$NFS_WORK/nfs4d-$who.err" &
        local p=$! _
        for _ in $(seq 100); do
            grep -q "^nfs4d: NFSv4.1 on" "$NFS_WORK/nfs4d-$who.err" 2>/dev/null && break
            sleep 0.1
        done
        if [ "$who" = kernel ]; then
            timeout 60 mount -t nfs -o vers=4.1,proto=rdma,port=20051 "$IP:/" "$MNT" \
                && umount "$MNT"
            echo "nfs4d: the kernel's mount and umount ended $?"
        else
            timeout 60 nfs4probe --server "$IP" --port 20051 | tail -n 1
        fi
        sleep 1
        kill -INT "$p"
        wait "$p"
        cat "$out"
        if grep -q '"cb_null":[1-9]' "$out" && grep -q '"cb_sequence":[1-9]' "$out" \
            && grep -q '"errors":0' "$out"; then
            pass "nfs4d: the $who client answered CB_NULL and CB_SEQUENCE over RDMA"
        else
            cat "$NFS_WORK/nfs4d-$who.err"
            fail "nfs4d: the $who client's callbacks"
        fi
    done
}

# NULL and GETATTR round trips of SERVER over NFSv4.1 (nfs4probe: 300 of each, one after
# another; medians in microseconds), as JSON lines in the times file.
nfs4_rtt() { # SERVER PORT
    local out
    command -v nfs4probe >/dev/null || return 0
    if out=$(timeout 120 nfs4probe --server "$IP" --port "$2" --rtt 300 2>&1 | grep '"rtt"'); then
        echo "$1: $out"
        echo "{\"server\":\"$1\",\"step\":\"rtt4\",$(sed 's/^{//; s/}$//' <<<"$out")}" >>"$NFS_WORK/times.jsonl"
        pass "$1: NFSv4.1 NULL and GETATTR round trips"
    else
        fail "$1: NFSv4.1 round trips (nfs4probe --rtt)"
    fi
}

NFS4D_PID=
# Starts nfs4d on port 20051 exporting $NEXPORT (no_root_squash, as the kernel's export:
# the workload runs as root); its output goes to $NFS_WORK/nfs4d.out and .err.
nfs4d_start() {
    nfs4d --export "$NEXPORT" --listen "$IP:20051" --provider verbs --device rxe0 \
        --no-root-squash --state-dir "$NFS_WORK/nfs4d-state" --grace 10 \
        >"$NFS_WORK/nfs4d.out" 2>"$NFS_WORK/nfs4d.err" &
    NFS4D_PID=$!
    local _
    for _ in $(seq 100); do
        grep -q "^nfs4d: NFSv4.1 on" "$NFS_WORK/nfs4d.err" 2>/dev/null && return 0
        sleep 0.1
    done
    cat "$NFS_WORK/nfs4d.err"
    return 1
}

nfs4d_stop() {
    stop_server "$NFS4D_PID"
    NFS4D_PID=
}

# The Linux client's default mount (no vers=: 4.2, falling back to 4.1) of nfs4d, and the
# same workload as NFSv3's: 64 MiB by dd, a tree copied, compared, renamed and removed,
# links, a 2,000-entry directory. The kernel's nfsd over NFSv4.1 the same way first, as
# the reference of the same run.
nfs4_workload() {
    banner "NFS: NFSv4.1 over RDMA, kernel nfsd, then nfs4d (the default mount)"
    if [ -z "${NFS_SKIP_KERNEL:-}" ]; then
        client_workload kernel-nfsd-v4 20049 - / "$KEXPORT" yes \
            "vers=4.1,proto=rdma,port=20049"
        nfs4_rtt kernel-nfsd-v4 20049
    fi
    if nfs4d_start; then
        client_workload nfs4d 20051 - / "$NEXPORT" yes "proto=rdma,port=20051"
        nfs4_rtt nfs4d 20051
        # A read delegation held by a second client (nfs4probe on the engine), recalled
        # over its back channel when the kernel's client opens the file for writing.
        if command -v nfs4probe >/dev/null \
            && timeout 60 mount -t nfs -o proto=rdma,port=20051 "$IP:/" "$MNT"; then
            backchannel_probe nfs4d 20051 "$MNT"
            umount "$MNT"
        fi
        nfs4d_stop
        cat "$NFS_WORK/nfs4d.out"
        tail -n 5 "$NFS_WORK/nfs4d.err"
    else
        fail "nfs4d: start"
    fi
}

# `rpcrdma sweep` of a server's NFSv3 NULL (`--op prog:100003:3:0`) at two depths: the
# tuning tool against any server, the kernel's included.
sweep_null() { # SERVER PORT
    local out
    command -v rpcrdma >/dev/null || return 0
    if out=$(timeout 180 rpcrdma sweep --provider verbs --connect "$IP:$2" --op prog:100003:3:0 \
        --inline 4k --credits 32 --depth 1,8 --reps 1 --seconds 0.5 --warmup 0.1 --json - 2>&1) \
        && [ "$(grep -c '"op":"prog:100003:3:0"' <<<"$out")" -ge 2 ]; then
        grep -o '"depth":[0-9]*\|"p50":[0-9]*\|"rate_rps":[0-9.]*' <<<"$out" | paste -sd' '
        pass "$1: rpcrdma sweep of the NFS NULL"
    else
        echo "$out" | tail -n 20
        fail "$1: rpcrdma sweep of the NFS NULL"
    fi
}

# Round trips from the engine's requester, the p50 in microseconds as a timed step: NULL
# (the transport and dispatch), then GETATTR of the export's root (a procedure that reaches
# the server's file system).
null_rtt() { # SERVER PORT MOUNTPORT REMOTE
    rtt "$1" null-rtt-p50-us "NULL" --server "$IP" --port "$2" --null-bench "${NULL_N:-2000}"
    rtt "$1" getattr-rtt-p50-us "GETATTR" --server "$IP" --port "$2" --mountport "$3" \
        --export "$4" --getattr-bench "${NULL_N:-2000}"
}

rtt() { # SERVER STEP WHAT NFS3PROBE-ARGS...
    local s=$1 step=$2 what=$3 out p50
    shift 3
    if out=$(timeout 120 nfs3probe "$@" 2>&1) \
        && p50=$(sed -n 's/.*"p50":\([0-9]*\).*/\1/p' <<<"$out") && [ -n "$p50" ]; then
        echo "$s: $out"
        echo "{\"server\":\"$s\",\"step\":\"$step\",\"seconds\":$(awk -v v="$p50" 'BEGIN { printf "%.3f", v / 1000 }'),\"ok\":true}" \
            >>"$NFS_WORK/times.jsonl"
        pass "$s: $what round trips from the engine"
    else
        echo "$out"
        fail "$s: $what round trips from the engine"
    fi
}

# nfs3d --allow: a client outside the blocks is refused at MOUNT (MNT3ERR_ACCES) and at the
# RDMA connection (an RDMA_CM reject), one inside is served.
allow_checks() {
    banner "NFS: nfs3d --allow refuses a client outside it, serves one inside"
    if nfs3d_start nfs3d nfs3d-allow --allow 192.0.2.0/24; then
        if timeout 60 mount -t nfs -o "vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock,retry=0" \
            "$IP:/" "$MNT" 2>"$NFS_WORK/allow-mount.err"; then
            fail "nfs3d --allow 192.0.2.0/24: the mount from $IP must be refused"
            umount "$MNT"
        else
            pass "nfs3d --allow 192.0.2.0/24: mount from $IP refused ($(head -c 80 "$NFS_WORK/allow-mount.err"))"
        fi
        if command -v nfs3probe >/dev/null \
            && timeout 60 nfs3probe --server "$IP" --port 20050 --null-bench 10 >"$NFS_WORK/allow-probe.log" 2>&1; then
            fail "nfs3d --allow 192.0.2.0/24: an RDMA connection from $IP must be refused"
        else
            pass "nfs3d --allow 192.0.2.0/24: RDMA connection from $IP refused"
        fi
        nfs3d_stop
        if grep -q "refused a connection from" "$NFS_WORK/nfs3d-allow.err"; then
            pass "nfs3d logged the refused connection"
        else
            fail "nfs3d did not log a refused connection"
            tail -n 5 "$NFS_WORK/nfs3d-allow.err"
        fi
    else
        fail "nfs3d --allow start"
    fi
    if nfs3d_start nfs3d nfs3d-allow --allow 10.0.2.0/24; then
        if timeout 120 mount -t nfs -o "vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock" \
            "$IP:/" "$MNT" && ls "$MNT" >/dev/null && umount "$MNT"; then
            pass "nfs3d --allow 10.0.2.0/24: mount from $IP served"
        else
            fail "nfs3d --allow 10.0.2.0/24: mount from $IP"
        fi
        nfs3d_stop
    else
        fail "nfs3d --allow start"
    fi
}

# Issue 33's mount measurement: one mount of the workload per server is too few in this
# emulated guest (a single mount varied 0.31-0.83 s on the kernel's nfsd in one run, the
# mount command's own start-up being most of it), so MOUNT_ROUNDS (default 7) more mounts
# and umounts of each server are timed, the servers taking turns and the first place
# alternating, twice: nfs3d started afresh for each mount (its first connection: the accept
# and the first Calls of a server that has not served yet; steps "mount-round",
# "accept-round-ms", "confirm-round-ms"), then one nfs3d kept running through the rounds,
# as the kernel's nfsd is (step "mount-running"). A fresh process pays here what a running
# server does not: this guest's emulator translates a program's code at its first run, and
# again in every new process, whose code is mapped at another address. many_conns prints
# the medians.
MOUNT_ROUNDS=${MOUNT_ROUNDS:-7}
mount_rounds() {
    mount_rounds_fresh
    mount_rounds_running
}

# Sets MOUNT_CMD to the kernel client's NFSv3-over-RDMA mount of SERVER on $MNT: the
# kernel's nfsd (kernel-nfsd) or nfs3d on the ports nfs3d_start gives it.
mount_cmd() { # SERVER
    local port=20050 mport=20058 remote=/
    [ "$1" = kernel-nfsd ] && port=20049 mport=20048 remote=$KEXPORT
    MOUNT_CMD=(mount -t nfs -o "vers=3,proto=rdma,port=$port,mountport=$mport,mountproto=tcp,nolock"
        "$IP:$remote" "$MNT")
}

# One timed mount and umount of SERVER as step STEP.
timed_mount() { # SERVER STEP
    mount_cmd "$1"
    timed "$1" "$2" "${MOUNT_CMD[@]}" && timeout 60 umount "$MNT"
}

# One mount and umount of SERVER, not timed (a running server's first, which the rounds
# leave out); fails if either does.
untimed_mount() { # SERVER
    mount_cmd "$1"
    timeout 60 "${MOUNT_CMD[@]}" && timeout 60 umount "$MNT"
}

# The servers' order in round R of the mount rounds: the first place alternates.
round_order() { # R
    if (($1 % 2)); then echo "kernel-nfsd nfs3d"; else echo "nfs3d kernel-nfsd"; fi
}

# Each time of SERVER's STEP in the times file, in order, on one line.
step_times() { # SERVER STEP
    grep "\"server\":\"$1\",\"step\":\"$2\"" "$NFS_WORK/times.jsonl" \
        | sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' | tr '\n' ' '
}

# The rounds against one nfs3d started before them (one mount first, not counted).
mount_rounds_running() {
    local r v
    banner "NFS: issue 33: $MOUNT_ROUNDS mounts of each server, alternated, nfs3d kept running"
    nfs3d_start nfs3d nfs3d-running || { fail "issue 33: nfs3d start (running rounds)"; return; }
    if ! untimed_mount nfs3d; then
        fail "issue 33: the first mount of the running nfs3d"
        nfs3d_stop
        return
    fi
    for ((r = 1; r <= MOUNT_ROUNDS; r++)); do
        for v in $(round_order "$r"); do
            timed_mount "$v" mount-running
        done
    done
    nfs3d_stop
}

# The rounds with nfs3d started afresh for each of its mounts, its accept times kept.
mount_rounds_fresh() {
    local r v ms
    banner "NFS: issue 33: $MOUNT_ROUNDS mounts of each server, alternated"
    for ((r = 1; r <= MOUNT_ROUNDS; r++)); do
        for v in $(round_order "$r"); do
            if [ "$v" = nfs3d ]; then
                nfs3d_start nfs3d nfs3d-rounds || { fail "issue 33: nfs3d start (mount rounds)"; return; }
            fi
            timed_mount "$v" mount-round
            [ "$v" = nfs3d ] || continue
            nfs3d_stop
            ms=$(grep -m 1 'accepted a connection' "$NFS_WORK/nfs3d-rounds.err" | accept_ms)
            [ -n "$ms" ] && echo "{\"server\":\"nfs3d\",\"step\":\"accept-round-ms\",\"seconds\":$ms,\"ok\":true}" \
                >>"$NFS_WORK/times.jsonl"
            ms=$(grep -m 1 'accepted a connection' "$NFS_WORK/nfs3d-rounds.err" | confirm_ms)
            [ -n "$ms" ] && echo "{\"server\":\"nfs3d\",\"step\":\"confirm-round-ms\",\"seconds\":$ms,\"ok\":true}" \
                >>"$NFS_WORK/times.jsonl"
        done
    done
}

# The milliseconds of each nfs3d "accepted a connection ... in N ms, ..." line on stdin.
accept_ms() { sed -n 's/.* in \([0-9.]*\) ms, .*/\1/p'; }
# The part of them spent waiting for the client's confirmation (ESTABLISHED), same lines.
confirm_ms() { sed -n 's/.*; \([0-9.]*\) ms of the accept waited for the client to confirm.*/\1/p'; }

# Issue 33's measurement: (a) what accepting the kernel client's connection cost nfs3d
# (the first "accepted a connection" line of the workload's run: its mount) and the mount's
# time on nfs3d over the kernel's nfsd's; (b) 64 connections from the engine's requester
# (nfs3probe --conns 64: all held open at once, each checked with NULL, GETATTR, LOOKUP and
# a 64 KiB READ) while the kernel's mount is up: all served, the mount still working, no
# connection lost but the probes' own, and nfs3d's registered memory after them. Each line
# it prints starts with "issue 33:".
MANY_CONNS=${MANY_CONNS:-64}
many_conns() {
    local line ms k n err j v live lost
    banner "NFS: issue 33: accept cost, and $MANY_CONNS connections beside the kernel's mount"
    line=$(grep -m 1 'accepted a connection' "$NFS_WORK/nfs3d.err" 2>/dev/null)
    ms=$(accept_ms <<<"$line")
    if [ -n "$ms" ]; then
        echo "issue 33: nfs3d accepted the kernel client's mount connection in $ms ms: ${line#*ms, }"
        pass "issue 33: the accept of the kernel's mount measured ($ms ms)"
    else
        fail "issue 33: no accept line for the kernel's mount in nfs3d.err"
    fi
    k=$(nfs_time kernel-nfsd mount)
    n=$(nfs_time nfs3d mount)
    if [ -n "$k" ] && [ -n "$n" ]; then
        awk -v k="$k" -v n="$n" 'BEGIN { printf "issue 33: mount (the workload'"'"'s, one each): nfs3d %.3f s, kernel nfsd %.3f s, nfs3d/kernel %.2f\n", n, k, (k > 0 ? n / k : 0) }'
    fi
    k=$(nfs_time kernel-nfsd mount-round)
    n=$(nfs_time nfs3d mount-round)
    ms=$(nfs_time nfs3d accept-round-ms)
    local cms
    cms=$(nfs_time nfs3d confirm-round-ms)
    if [ -n "$k" ] && [ -n "$n" ]; then
        awk -v k="$k" -v n="$n" -v r="$MOUNT_ROUNDS" -v a="${ms:-0}" -v c="${cms:-0}" 'BEGIN { printf "issue 33: mount (medians of %d alternated, nfs3d started afresh for each): nfs3d %.3f s, kernel nfsd %.3f s, nfs3d/kernel %.2f; nfs3d'"'"'s accept %.1f ms, of which %.1f ms waiting for the client to confirm\n", r, n, k, (k > 0 ? n / k : 0), a, c }'
        echo "issue 33: every mount-round (seconds): kernel-nfsd $(step_times kernel-nfsd mount-round)"
        echo "issue 33: every mount-round (seconds): nfs3d $(step_times nfs3d mount-round)"
    fi
    k=$(nfs_time kernel-nfsd mount-running)
    n=$(nfs_time nfs3d mount-running)
    if [ -n "$k" ] && [ -n "$n" ]; then
        awk -v k="$k" -v n="$n" -v r="$MOUNT_ROUNDS" 'BEGIN { printf "issue 33: mount (medians of %d alternated, nfs3d kept running as the kernel'"'"'s nfsd is): nfs3d %.3f s, kernel nfsd %.3f s, nfs3d/kernel %.2f\n", r, n, k, (k > 0 ? n / k : 0) }'
        echo "issue 33: every mount-running (seconds): kernel-nfsd $(step_times kernel-nfsd mount-running)"
        echo "issue 33: every mount-running (seconds): nfs3d $(step_times nfs3d mount-running)"
    fi
    # Room for the kernel's connection beside the probes' (64 per worker by default).
    if ! NFS3D_STATS_EVERY=1 nfs3d_start nfs3d nfs3d-many --max-conns $((MANY_CONNS + 8)); then
        fail "issue 33: nfs3d start"
        return
    fi
    head -c $((256 << 10)) /dev/urandom >"$NEXPORT/many-data"
    if ! timeout 120 mount -t nfs -o "vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock" \
        "$IP:/" "$MNT"; then
        fail "issue 33: the kernel's mount of nfs3d"
        dmesg | tail -n 20
        nfs3d_stop
        return
    fi
    # Calls in flight on the kernel's connection while the probes connect.
    timeout 120 cmp "$MNT/many-data" "$NEXPORT/many-data" || fail "issue 33: the file read through the mount before the probes differs"
    local t0=$EPOCHREALTIME rnr
    rnr=$(rnr_counts)
    if timeout 300 nfs3probe --server "$IP" --port 20050 --mountport 20058 --export / --local "$NEXPORT" \
        --read-file many-data --conns "$MANY_CONNS" >"$NFS_WORK/many.log" 2>&1; then
        pass "issue 33: $MANY_CONNS connections from the engine's requester, all served"
    else
        fail "issue 33: $MANY_CONNS connections from the engine's requester"
    fi
    sed 's/^/issue 33: /' "$NFS_WORK/many.log" | tail -n 6
    echo "issue 33: the $MANY_CONNS connections took $(since "$t0") s in all"
    line=$(grep 'accepted a connection' "$NFS_WORK/nfs3d-many.err" | tail -n 1)
    echo "issue 33: nfs3d's registered memory after them (at its last accept): ${line#*registered for it*; }"
    echo "issue 33: accepts of the $MANY_CONNS: $(grep 'accepted a connection' "$NFS_WORK/nfs3d-many.err" | tail -n "$MANY_CONNS" \
        | accept_ms | sort -n \
        | awk '{ a[NR] = $1 } END { if (NR) printf "%d, p50 %.1f ms, max %.1f ms", NR, a[int((NR + 1) / 2)], a[NR] }')"
    # The kernel's mount still works: a listing, a stat, the file read back, a new file.
    if timeout 60 ls "$MNT" >/dev/null && timeout 60 stat "$MNT/many-data" >/dev/null \
        && drop_caches && timeout 60 cmp "$MNT/many-data" "$NEXPORT/many-data" \
        && timeout 60 cp "$NEXPORT/many-data" "$MNT/many-copy" && timeout 60 sync \
        && cmp "$NEXPORT/many-copy" "$NEXPORT/many-data"; then
        pass "issue 33: the kernel's mount works after the $MANY_CONNS connections (ls, stat, read, write)"
    else
        fail "issue 33: the kernel's mount after the $MANY_CONNS connections"
        dmesg | tail -n 20
    fi
    rnr_check "issue 33: $MANY_CONNS connections and the kernel's mount" "$rnr"
    # Its counters a second later: the kernel's connection still live, every other
    # connection lost only by its own close (the probes'), no overrun, no errors.
    sleep 2
    j=$(grep '^{' "$NFS_WORK/nfs3d-many.err" | tail -n 1)
    live=$(grep -o '"conns":[0-9]*' <<<"$j" | head -n 1 | cut -d: -f2)
    lost=$(grep -o '"conn_lost":[0-9]*' <<<"$j" | head -n 1 | cut -d: -f2)
    err=$(grep -o '"\(credit_overruns\|wc_errors\|stalls\|post_refused\)":[0-9]*' <<<"$j" | paste -sd' ')
    echo "issue 33: nfs3d's counters after them: live connections ${live:-?}, conn_lost ${lost:-?}, $err"
    if [ "${live:-x}" = 1 ] && [ "${lost:-x}" -le "$MANY_CONNS" ] && ! grep -q '":[1-9]' <<<"$err" && [ -n "$err" ]; then
        pass "issue 33: nfs3d lost no connection (the kernel's live, $lost closed by the probes)"
    else
        fail "issue 33: nfs3d's connections after the $MANY_CONNS (live ${live:-?}, conn_lost ${lost:-?}, $err)"
    fi
    if grep -q 'refused a connection' "$NFS_WORK/nfs3d-many.err"; then
        grep 'refused a connection' "$NFS_WORK/nfs3d-many.err" | head -n 3
        fail "issue 33: nfs3d refused connections"
    fi
    rm -f "$MNT/many-copy"
    timeout 60 umount "$MNT" || fail "issue 33: umount"
    nfs3d_stop
    rm -f "$NEXPORT/many-data"
    tail -n 3 "$NFS_WORK/nfs3d-many.err" | cut -c 1-600
}
