#!/bin/bash
# guest-nfs-suites.sh: third-party NFS test suites and identity checks on both servers,
# INSIDE the guest. Sourced by guest-vm-test.sh after guest-nfs.sh (pass, fail, banner and
# wait_listen from guest-lib.sh; kernel_nfsd_stop, nfs3d_start, nfs3d_stop, nfs4d_start,
# nfs4d_stop, now, since from guest-nfs.sh), or run alone:
#
#   guest-nfs-suites.sh [suites|identity|all]    (default all; needs guest-lib.sh and
#                                                 guest-nfs.sh beside it, nfs3d and nfs4d
#                                                 on PATH)
#
# nfs_suites: for each server, each exporting a fresh tmpfs that the kernel's client
# mounts over RDMA, runs as root cthon04 basic, special and lock (the image's /opt/cthon04;
# each part one unit) and pjdfstest (each of its tests one unit). The servers, by name:
#   kernel-nfsd     the kernel's nfsd (export no_root_squash), mounted vers=3,nolock
#   nfs3d           nfs3d (started with $NFS3D_SUITE_ARGS, default --no-root-squash),
#                   mounted vers=3,nolock
#   kernel-nfsd-v4  the kernel's nfsd as kernel-nfsd, mounted vers=4.1 (locks: NFSv4 LOCK)
#   nfs4d           nfs4d (nfs4d_start: --no-root-squash), the client's default mount (no
#                   vers=: it settles on 4.1), locks over NFSv4 LOCK
# It passes when every unit that fails on nfs3d fails on kernel-nfsd too, and every unit
# that fails on nfs4d fails on kernel-nfsd-v4 too: a FAIL line names each unit that fails
# on nfs3d (nfs4d) only. A part that does not finish in its time (a hung mount) is a FAIL
# of its own, and the server's remaining parts are skipped.
#
# nfs_identity (NFSv3 only: kernel-nfsd and nfs3d, those of $SUITES_SERVERS): for each
# server with its default export (root squashed), on a root-owned 0755 export root with a
# 0777 and a sticky 1777 subdirectory: root cannot create in the root; a file made by uid
# 1000 belongs to 1000:1000 on the server; uid 1001 can neither chmod, truncate nor rename
# uid 1000's 0644 file. One check each, per server.
#
# Environment: SUITES_SERVERS (default "kernel-nfsd nfs3d kernel-nfsd-v4 nfs4d"),
# NFS3D_SUITE_ARGS, CTHON_LIMIT (seconds per cthon04 part, default 300), PJD_LIMIT
# (seconds for pjdfstest, default 900), PJD_TESTS (pjdfstest's name filters, default all).

SUITES_WORK=/tmp/nfs-suites
SUITES_MNT=/mnt/suites
CTHON04=/opt/cthon04
SUITES_SERVERS=${SUITES_SERVERS:-kernel-nfsd nfs3d kernel-nfsd-v4 nfs4d}
NFS3D_SUITE_ARGS=${NFS3D_SUITE_ARGS---no-root-squash}
CTHON_LIMIT=${CTHON_LIMIT:-300}
PJD_LIMIT=${PJD_LIMIT:-900}
PJD_TESTS=${PJD_TESTS:-}
# The kernel's nfsd fails these on a tmpfs export (peer-suites README): a note, not a
# failure, when its list differs.
KERNEL_KNOWN_FAILS="pjdfstest:unlink::open_file_not_freed pjdfstest:utimensat::y2038"

# Modules, the nfsd file system, folders: what nfs_setup does, for a run without it.
suites_setup() {
    mkdir -p "$SUITES_WORK" "$SUITES_MNT" "${NFS_WORK:-/tmp/nfs-work}" /var/lib/nfs /run/rpcbind
    modprobe -a sunrpc rpcrdma nfs nfsv3 nfsd || return 1
    grep -q ' /proc/fs/nfsd ' /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd || return 1
    # pjdfstest's configuration: the opt-in features Linux has (not chflags, NFSv4 ACLs,
    # birth times), short naps, its two users as the image has them.
    printf '%s\n' '[features]' 'posix_fallocate = {}' 'rename_ctime = {}' 'utime_now = {}' \
        'utimensat = {}' '[settings]' 'naptime = 0.02' '[dummy_auth]' \
        'entries = [["nobody", "nogroup"], ["tests", "tests"]]' >"$SUITES_WORK/pjdfstest.toml"
}

# A fresh tmpfs on DIR, its root MODE and owned by root.
fresh_export() { # DIR MODE
    umount "$1" 2>/dev/null
    mkdir -p "$1" && mount -t tmpfs -o "size=512m,mode=$2" tmpfs "$1"
}

# The kernel's nfsd exporting DIR with OPTIONS: kernel_nfsd_start's steps with the
# options given, each daemon started only if it is not running yet.
suites_kernel_start() { # DIR OPTIONS
    echo "$1 *($2)" >/etc/exports
    # NFSv4's grace period (90 s by default), during which nfsd refuses OPEN and LOCK with
    # NFS4ERR_GRACE, and lockd's, short as kernel_nfsd_start has them (nfsd not running:
    # they cannot be set while it is).
    echo 10 >/proc/fs/nfsd/nfsv4gracetime 2>/dev/null
    echo 10 >/proc/sys/fs/nfs/nlm_grace_period 2>/dev/null
    pidof rpcbind >/dev/null || rpcbind -w 2>/dev/null || rpcbind || return 1
    exportfs -ra || return 1
    pidof rpc.mountd >/dev/null || rpc.mountd -p 20048 || return 1
    rpc.nfsd 4 || return 1
    grep -q '^rdma 20049' /proc/fs/nfsd/portlist || echo "rdma 20049" >/proc/fs/nfsd/portlist
}

# Starts SERVER exporting a fresh tmpfs at DIR (root MODE) and mounts it on $SUITES_MNT
# with client_workload's options (nfs4_workload's for the NFSv4.1 servers). KIND: suites
# (no_root_squash) or identity (defaults; not nfs4d, which nfs4d_start runs
# no_root_squash). Sets SRV_REMOTE and SRV_OPTS (the mount's options).
server_up() { # SERVER KIND DIR MODE
    local s=$1 kind=$2 dir=$3 opts
    if ! fresh_export "$dir" "$4"; then
        echo "no tmpfs on $dir"
        return 1
    fi
    case $s in
        kernel-nfsd | kernel-nfsd-v4)
            opts="rw,no_subtree_check,insecure,fsid=0"
            [ "$kind" = suites ] && opts="rw,no_root_squash,no_subtree_check,insecure,fsid=0"
            echo "$s: exporting $dir *($opts)"
            suites_kernel_start "$dir" "$opts" || return 1
            if [ "$s" = kernel-nfsd ]; then
                SRV_REMOTE=$dir
                SRV_OPTS="vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,nolock"
            else
                # fsid=0: the export is NFSv4's pseudo-root.
                SRV_REMOTE=/ SRV_OPTS="vers=4.1,proto=rdma,port=20049"
            fi
            ;;
        nfs3d)
            local -a args=()
            [ "$kind" = suites ] && read -r -a args <<<"$NFS3D_SUITE_ARGS"
            echo "nfs3d: exporting $dir with ${args[*]:-its defaults}"
            # nfs3d_start's own options (NFS3D_EXPORT_OPTS) are replaced by these.
            NEXPORT=$dir NFS3D_EXPORT_OPTS="" nfs3d_start nfs3d "nfs3d-$kind" "${args[@]}" || return 1
            SRV_REMOTE=/
            SRV_OPTS="vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock"
            ;;
        nfs4d)
            if [ "$kind" != suites ]; then
                echo "nfs4d: no $kind export (nfs4d_start exports no_root_squash)"
                return 1
            fi
            echo "nfs4d: exporting $dir (no_root_squash)"
            NEXPORT=$dir nfs4d_start || return 1
            # The client's default: no vers= (it settles on 4.1), NFSv4 locks.
            SRV_REMOTE=/ SRV_OPTS="proto=rdma,port=20051"
            ;;
        *)
            echo "no server named $s"
            return 1
            ;;
    esac
    timeout -s KILL 60 mount -t nfs -o "$SRV_OPTS" "$IP:$SRV_REMOTE" "$SUITES_MNT" || return 1
    # The options the client settled on (the NFS version among them).
    grep " $SUITES_MNT nfs" /proc/mounts
}

# Unmounts (forced and lazy if a plain umount does not do in 30 s), stops SERVER, drops DIR.
server_down() { # SERVER KIND DIR
    if grep -q " $SUITES_MNT nfs" /proc/mounts; then
        timeout -s KILL 30 umount "$SUITES_MNT" || umount -f -l "$SUITES_MNT"
    fi
    case $1 in
        kernel-nfsd | kernel-nfsd-v4) kernel_nfsd_stop >/dev/null 2>&1 ;;
        nfs3d)
            nfs3d_stop
            tail -n 5 "$NFS_WORK/nfs3d-$2.err" 2>/dev/null
            ;;
        nfs4d)
            nfs4d_stop
            # Kept (nfs4d_start's files are the same for every start).
            cp "$NFS_WORK/nfs4d.err" "$SUITES_WORK/nfs4d-$2.err" 2>/dev/null
            cp "$NFS_WORK/nfs4d.out" "$SUITES_WORK/nfs4d-$2.out" 2>/dev/null
            tail -n 5 "$NFS_WORK/nfs4d.err" 2>/dev/null
            ;;
    esac
    umount "$3" 2>/dev/null
}

# One cthon04 part on the mount, its output to stdout, killed after $CTHON_LIMIT s (exit
# 137). The exit status is the part's.
cthon_part() { # basic|special|lock
    case $1 in
        basic) (cd "$CTHON04" && exec timeout -s KILL "$CTHON_LIMIT" ./runtests -b -t "$SUITES_MNT/cthon-basic") ;;
        lock) (cd "$CTHON04" && exec timeout -s KILL "$CTHON_LIMIT" ./runtests -l -t "$SUITES_MNT/cthon-lock") ;;
        special)
            # As special/runtests does it, without make: the tests copied to the test
            # folder and run there.
            # shellcheck disable=SC2016  # expanded by that sh
            timeout -s KILL "$CTHON_LIMIT" sh -c 'mkdir "$1" && cp "$2"/special/* "$1"/ && cd "$1" \
                && PATH=$PATH:. exec sh ./runtests.wrk FROM_RUNTESTS' _ "$SUITES_MNT/cthon-special" "$CTHON04"
            ;;
    esac
}

# The step a cthon04 log stopped in: its last heading (basic: "./testN: ...", special:
# the line runtests.wrk echoes before each test, lock: "Testing ...").
cthon_where() { # LOG
    grep -E '^\./test[0-9a-z]*:|^(check|test|write|second|Testing) ' "$1" | tail -n 1 | cut -c1-100
}

# Runs every suite on the mounted SERVER. Writes $SUITES_WORK/SERVER/failed (one unit a
# line: cthon04:basic, pjdfstest:chmod::...), .../incomplete (what did not finish) and
# .../summary (one line a part).
suites_run() { # SERVER
    local s=$1 dir=$SUITES_WORK/$1 t rc part secs
    rm -rf "$dir"
    mkdir -p "$dir"
    : >"$dir/failed"
    : >"$dir/incomplete"
    : >"$dir/summary"
    for part in basic special lock; do
        banner "NFS suites: $s: cthon04 $part"
        t=$(now)
        cthon_part "$part" >"$dir/cthon04-$part.log" 2>&1
        rc=$?
        secs=$(since "$t")
        if [ "$rc" -eq 0 ] && grep -qE 'Congratulations|Special tests complete' "$dir/cthon04-$part.log"; then
            echo "cthon04-$part ok, $secs s" | tee -a "$dir/summary"
        elif [ "$rc" -eq 137 ] || [ "$rc" -eq 124 ]; then
            echo "cthon04-$part did not finish in $CTHON_LIMIT s (at: $(cthon_where "$dir/cthon04-$part.log"))" \
                | tee -a "$dir/summary" "$dir/incomplete"
            tail -n 15 "$dir/cthon04-$part.log"
            dmesg | tail -n 10
            return 1
        else
            echo "cthon04:$part" >>"$dir/failed"
            echo "cthon04-$part FAILED (exit $rc), $secs s, at: $(cthon_where "$dir/cthon04-$part.log")" \
                | tee -a "$dir/summary"
            # Not only the tail: the tests' stdout is buffered, their stderr is not, so
            # the error can come out before the headings printed ahead of it.
            tail -n 40 "$dir/cthon04-$part.log"
        fi
        echo "{\"server\":\"$s\",\"step\":\"cthon04-$part\",\"seconds\":$secs,\"ok\":$([ "$rc" -eq 0 ] && echo true || echo false)}" \
            >>"$dir/times.jsonl"
    done

    banner "NFS suites: $s: pjdfstest"
    t=$(now)
    timeout -s KILL 30 mkdir -p "$SUITES_MNT/pjdfstest"
    local -a filters=()
    read -r -a filters <<<"$PJD_TESTS"
    (cd / && NO_COLOR=1 timeout -s KILL "$PJD_LIMIT" pjdfstest -c "$SUITES_WORK/pjdfstest.toml" \
        -p "$SUITES_MNT/pjdfstest" "${filters[@]}") 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >"$dir/pjdfstest.log"
    rc=${PIPESTATUS[0]}
    secs=$(since "$t")
    # A failed test's line ends in FAILED (or PASSED UNEXPECTEDLY, with expected failures
    # configured); the line after it says why.
    awk '$NF == "FAILED" || / PASSED UNEXPECTEDLY$/ { print "pjdfstest:" $1 }' "$dir/pjdfstest.log" \
        | sort -u >>"$dir/failed"
    # Each failed test with the first lines of its panic message (tab-indented).
    awk '$NF == "FAILED" { print; n = 3; next } n > 0 && /^[\t ]/ { print; n--; next } { n = 0 }' \
        "$dir/pjdfstest.log" | cut -c1-200
    # Why tests were skipped, with counts.
    awk '$NF == "skipped" { r = 1; next } r && /^\t/ { sub(/^\t/, ""); n[$0]++; next } { r = 0 }
         END { for (k in n) printf "skipped %d: %s\n", n[k], k }' "$dir/pjdfstest.log" | sort
    local summary
    summary=$(grep '^Summary:' "$dir/pjdfstest.log" | tail -n 1)
    if [ -n "$summary" ] && [ "$rc" -le 1 ]; then
        echo "pjdfstest $summary, $secs s" | tee -a "$dir/summary"
    else
        echo "pjdfstest did not finish (exit $rc after $secs s, limit $PJD_LIMIT s; last test: $(grep -E ' (ok|FAILED|skipped)$' "$dir/pjdfstest.log" | tail -n 1 | awk '{ print $1 }'))" \
            | tee -a "$dir/summary" "$dir/incomplete"
        tail -n 5 "$dir/pjdfstest.log"
        dmesg | tail -n 10
    fi
    echo "{\"server\":\"$s\",\"step\":\"pjdfstest\",\"seconds\":$secs,\"ok\":$([ "$rc" -eq 0 ] && echo true || echo false)}" \
        >>"$dir/times.jsonl"
    [ ! -s "$dir/incomplete" ]
}

# Lines of file A not in file B (by file name, not NR == FNR: B may be empty).
lines_not_in() { # A B
    awk -v b="$2" 'FILENAME == b { seen[$0] = 1; next } !($0 in seen)' "$2" "$1"
}

# The verdict on SERVER: every unit that fails on it must fail on REF (the kernel's nfsd
# over the same NFS version, REF-NAME in the PASS and FAIL lines) too. None when either is
# not in $SUITES_SERVERS; a FAIL when either is not in RAN (its suites did not finish).
suites_verdict() { # SERVER REF REF-NAME RAN
    local s=$1 r=$2 rname=$3 ran=" $4 " sf rf only u
    if [[ " $SUITES_SERVERS " != *" $s "* ]] || [[ " $SUITES_SERVERS " != *" $r "* ]]; then
        return 0
    fi
    if [[ "$ran" != *" $s "* ]] || [[ "$ran" != *" $r "* ]]; then
        fail "nfs suites: no comparison of $s with $r (a server's suites did not finish)"
        return
    fi
    sf=$SUITES_WORK/$s/failed rf=$SUITES_WORK/$r/failed only=$SUITES_WORK/$s-only
    lines_not_in "$sf" "$rf" >"$only"
    echo "fail on both $r and $s: $(lines_not_in "$sf" "$only" | paste -sd' ')"
    echo "fail on $r only: $(lines_not_in "$rf" "$sf" | paste -sd' ')"
    echo "fail on $s only: $(grep -c . "$only")"
    if [ ! -s "$only" ]; then
        pass "$s: every suite unit that fails on $s fails on $rname ($(grep -c . "$sf") failed on $s, $(grep -c . "$rf") on $r)"
    else
        while read -r u; do
            fail "$s: $u fails (passes on $rname)"
        done <"$only"
    fi
}

nfs_suites() {
    local s dir n missing t
    banner "NFS suites: setup (cthon04, pjdfstest)"
    if ! suites_setup; then
        fail "nfs suites: setup"
        return
    fi
    missing=$(cat /etc/rxe-vm/suites-missing 2>/dev/null)
    if [ -n "$missing" ] || [ ! -x "$CTHON04/runtests" ] || ! command -v pjdfstest >/dev/null; then
        fail "nfs suites: not in the image: ${missing:-cthon04 or pjdfstest} (build-image.sh)"
        return
    fi
    local -a ran=()
    for s in $SUITES_SERVERS; do
        if { [ "$s" = nfs3d ] || [ "$s" = nfs4d ]; } && ! command -v "$s" >/dev/null; then
            fail "nfs suites: no $s on PATH"
            continue
        fi
        banner "NFS suites: $s (kernel client, RDMA, tmpfs export)"
        t=$(now)
        if ! server_up "$s" suites "/srv/suites-$s" 0755; then
            fail "$s: the suites' export does not start or mount"
            dmesg | tail -n 10
            server_down "$s" suites "/srv/suites-$s"
            continue
        fi
        if suites_run "$s"; then
            ran+=("$s")
        else
            fail "$s: suites did not finish: $(paste -sd';' "$SUITES_WORK/$s/incomplete")"
        fi
        server_down "$s" suites "/srv/suites-$s"
        echo "all, from start to stop, $(since "$t") s" | tee -a "$SUITES_WORK/$s/summary"
    done

    banner "NFS suites: results (failed units per server)"
    for s in $SUITES_SERVERS; do
        dir=$SUITES_WORK/$s
        [ -f "$dir/summary" ] || continue
        sed "s/^/$s: /" "$dir/summary"
    done
    for s in $SUITES_SERVERS; do
        dir=$SUITES_WORK/$s
        [ -f "$dir/failed" ] || continue
        echo "$s: $(grep -c . "$dir/failed") units failed"
        for n in cthon04 pjdfstest; do
            grep "^$n:" "$dir/failed" | sed "s/^$n://" | paste -sd' ' | fold -s -w 100 | sed "s/^/    $n: /"
        done
    done
    local k=$SUITES_WORK/kernel-nfsd/failed
    if [ -f "$k" ] && [[ " ${ran[*]} " == *" kernel-nfsd "* ]]; then
        tr ' ' '\n' <<<"$KERNEL_KNOWN_FAILS" >"$SUITES_WORK/kernel-known"
        n=$(lines_not_in "$k" "$SUITES_WORK/kernel-known" | paste -sd' ')
        [ -z "$n" ] || echo "note: kernel-nfsd fails more than the known two: $n"
        n=$(lines_not_in "$SUITES_WORK/kernel-known" "$k" | paste -sd' ')
        [ -z "$n" ] || echo "note: kernel-nfsd now passes: $n"
    fi

    # The verdicts: nfs3d's failures must be among the kernel nfsd's over NFSv3, nfs4d's
    # among its failures over NFSv4.1.
    suites_verdict nfs3d kernel-nfsd "the kernel's nfsd" "${ran[*]}"
    suites_verdict nfs4d kernel-nfsd-v4 "the kernel's nfsd over NFSv4.1" "${ran[*]}"
}

# The reason in a tool's first error line: its last ': ' field ("Permission denied").
why() { # FILE
    sed -n '1s/.*: //p' "$1" | cut -c1-60
}

# Runs CMD as uid and gid UID (no supplementary groups).
as_user() { # UID CMD...
    local u=$1
    shift
    timeout -s KILL 30 setpriv --reuid="$u" --regid="$u" --clear-groups -- "$@"
}

# The identity checks on SERVER, its export root DIR (root-owned 0755) on the server side.
identity_checks() { # SERVER DIR
    local s=$1 d=$2 m=$SUITES_MNT err=$SUITES_WORK/identity.err got
    # (a) Root on the client is squashed: no create in the root-owned 0755 root.
    if timeout -s KILL 30 touch "$m/made-by-root" 2>"$err"; then
        fail "$s: root squashed: client root created a file in the root-owned 0755 export root (owner $(stat -c %u:%g "$d/made-by-root" 2>&1))"
    elif grep -q 'Permission denied' "$err" && [ ! -e "$d/made-by-root" ]; then
        pass "$s: root squashed: client root cannot create in the root-owned 0755 export root (EACCES)"
    else
        fail "$s: root squashed: create by client root failed otherwise: $(head -c 120 "$err")"
    fi
    # (b) A file made by uid 1000 belongs to 1000:1000 on the server.
    if as_user 1000 sh -c "echo 0123456789 >'$m/users/by-1000'" 2>"$err" \
        && got=$(stat -c %u:%g "$d/users/by-1000" 2>&1) && [ "$got" = 1000:1000 ]; then
        pass "$s: a file made by uid 1000 is 1000:1000 on the server"
    else
        fail "$s: a file made by uid 1000 is ${got:-not made: $(head -c 120 "$err")} on the server, not 1000:1000"
    fi
    # (c) uid 1001 on uid 1000's 0644 file, in the sticky 1777 folder.
    local f=$m/sticky/of-1000 sf=$d/sticky/of-1000
    if ! as_user 1000 sh -c "echo 0123456789 >'$f' && chmod 0644 '$f'" 2>"$err" \
        || [ "$(stat -c %u:%a:%s "$sf" 2>&1)" != 1000:644:11 ]; then
        fail "$s: uid 1000's 0644 file in the sticky folder: not made ($(stat -c %u:%a:%s "$sf" 2>&1); $(head -c 120 "$err"))"
        return
    fi
    if as_user 1001 chmod 0666 "$f" 2>"$err"; then
        fail "$s: uid 1001 changed the mode of uid 1000's file (now $(stat -c %a "$sf"))"
    elif [ "$(stat -c %a "$sf")" = 644 ]; then
        pass "$s: uid 1001 cannot chmod uid 1000's file ($(why "$err"))"
    else
        fail "$s: uid 1001's chmod failed but the mode is $(stat -c %a "$sf")"
    fi
    if as_user 1001 truncate -s 0 "$f" 2>"$err"; then
        fail "$s: uid 1001 truncated uid 1000's 0644 file (size now $(stat -c %s "$sf"))"
    elif [ "$(stat -c %s "$sf")" = 11 ]; then
        pass "$s: uid 1001 cannot truncate uid 1000's 0644 file ($(why "$err"))"
    else
        fail "$s: uid 1001's truncate failed but the size is $(stat -c %s "$sf")"
    fi
    # The kernel's client applies the sticky rule itself (the VFS's check_sticky, from the
    # attributes the server gave): this RENAME never reaches a server that would allow it.
    if as_user 1001 mv "$f" "$m/sticky/renamed-by-1001" 2>"$err"; then
        fail "$s: uid 1001 renamed uid 1000's file in the sticky folder"
    elif [ -e "$sf" ] && [ ! -e "$d/sticky/renamed-by-1001" ]; then
        pass "$s: uid 1001 cannot rename uid 1000's file in the sticky folder ($(why "$err"))"
    else
        fail "$s: uid 1001's rename failed but the file is gone from its name"
    fi
}

nfs_identity() {
    local s d
    banner "NFS identity: default exports (root squashed)"
    if ! suites_setup; then
        fail "nfs identity: setup"
        return
    fi
    command -v setpriv >/dev/null || { fail "nfs identity: no setpriv in the image"; return; }
    for s in $SUITES_SERVERS; do
        # NFSv3's servers only.
        [ "$s" = kernel-nfsd ] || [ "$s" = nfs3d ] || continue
        [ "$s" = nfs3d ] && ! command -v nfs3d >/dev/null && continue
        d=/srv/identity-$s
        banner "NFS identity: $s"
        # The export root root-owned 0755 (fresh_export), a 0777 and a sticky folder.
        if ! server_up "$s" identity "$d" 0755 || ! mkdir -m 0777 "$d/users" || ! mkdir -m 1777 "$d/sticky"; then
            fail "$s: the identity export does not start or mount"
            dmesg | tail -n 10
            server_down "$s" identity "$d"
            continue
        fi
        identity_checks "$s" "$d"
        server_down "$s" identity "$d"
    done
}

# Run alone (not sourced): the helpers beside this file, then the parts asked for.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    PROG=nfs-suites
    IP=${IP:-10.0.2.15}
    here=$(dirname "$0")
    # shellcheck source=guest-lib.sh
    . "$here/guest-lib.sh"
    # shellcheck source=guest-nfs.sh
    . "$here/guest-nfs.sh"
    case ${1:-all} in
        suites) nfs_suites ;;
        identity) nfs_identity ;;
        all) nfs_suites; nfs_identity ;;
        *) echo "usage: $0 [suites|identity|all]" >&2; exit 2 ;;
    esac
    echo
    echo "$PROG: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
fi
