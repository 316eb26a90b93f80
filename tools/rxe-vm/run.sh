#!/bin/bash
# run.sh [OPTIONS] -- COMMAND [ARGS...]
#
# Boots the soft-RoCE guest built by build-image.sh under QEMU (TCG), runs
# COMMAND there with bash in /job, and exits with its exit code.
#
# Options:
#   --image DIR      image built by build-image.sh (default: $RXE_VM_IMAGE, else
#                    <repo>/target/rxe-vm)
#   --timeout SECS   whole run, boot included (default: $RXE_VM_TIMEOUT, else 600)
#   --bin FILE       copy FILE into the guest's /job/bin (on PATH); repeatable.
#                    Shared libraries it needs that the image lacks (host ldd)
#                    go to /job/lib (on LD_LIBRARY_PATH).
#   --env NAME=VAL   export NAME=VAL for COMMAND; repeatable
#   --mem SIZE       guest memory (default 2G)
#   --smp N          guest CPUs (default 2)
#   --kernel-args S  extra kernel command line, e.g. "loglevel=7" to see the
#                    kernel's messages in the console log
#   --link listen:SOCKET:MAC | connect:SOCKET:MAC
#                    a second NIC (eth1, MAC address MAC) joined to another guest by a
#                    stream on the host's Unix socket SOCKET (a path without ':'): one
#                    guest listens, the other connects once it does (two-host.sh waits
#                    for the socket). The stream loses no frame, as RoCE's Ethernet is
#                    meant to lose none (PFC): QEMU's datagram link dropped bursts in the
#                    host's full UDP buffers, and each loss stalled soft-RoCE for its 2 s
#                    retransmission timer; a TCP stream held small frames back 40 ms
#                    (Nagle). The guest job configures eth1 and its rxe device itself
#   --keep           keep the host work folder (share, console log) and print it
#   -v, --verbose    print boot and run timings on stderr
#
# COMMAND and ARGS are passed to the guest word for word (exec'd by bash); use
# `bash -c '...'` for shell syntax. The guest has rxe0 on eth0 (10.0.2.15/24,
# GID index 1 = ::ffff:10.0.2.15); the user-mode network is restricted, so no
# traffic leaves the guest.
#
# Exit codes: COMMAND's own; 124 when COMMAND timed out; 125 when the harness
# failed (bad usage, no image, guest did not boot or gave no exit code).

set -uo pipefail

PROG=rxe-vm
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

msg() { printf '%s: %s\n' "$PROG" "$*" >&2; }
fatal() { msg "error: $*"; exit 125; }
usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 125
}

IMAGE=${RXE_VM_IMAGE:-$REPO/target/rxe-vm}
TIMEOUT=${RXE_VM_TIMEOUT:-600}
MEM=2G
SMP=2
KARGS=
LINK=
KEEP=0
VERBOSE=0
BINS=()
ENVS=()

need_arg() { [ $# -ge 2 ] || { msg "$1 needs a value"; usage; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --image) need_arg "$@"; IMAGE=$2; shift 2 ;;
        --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --bin) need_arg "$@"; BINS+=("$2"); shift 2 ;;
        --env) need_arg "$@"; ENVS+=("$2"); shift 2 ;;
        --mem) need_arg "$@"; MEM=$2; shift 2 ;;
        --smp) need_arg "$@"; SMP=$2; shift 2 ;;
        --kernel-args) need_arg "$@"; KARGS=$2; shift 2 ;;
        --link) need_arg "$@"; LINK=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -v|--verbose) VERBOSE=1; shift ;;
        -h|--help) usage ;;
        --) shift; break ;;
        *) msg "unknown option: $1"; usage ;;
    esac
done
[ $# -ge 1 ] || { msg "no COMMAND given"; usage; }
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || fatal "--timeout must be a positive whole number of seconds"
[[ $SMP =~ ^[1-9][0-9]*$ ]] || fatal "--smp must be a positive number"
for e in "${ENVS[@]}"; do
    [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || fatal "--env wants NAME=VALUE, got: $e"
done
LINK_ARGS=()
if [ -n "$LINK" ]; then
    [[ $LINK =~ ^(listen|connect):([^:,]+):([0-9a-fA-F:]{17})$ ]] || fatal "--link wants listen:SOCKET:MAC or connect:SOCKET:MAC, got: $LINK"
    server=off
    [ "${BASH_REMATCH[1]}" = listen ] && server=on
    LINK_ARGS=(-netdev "stream,id=n1,server=$server,addr.type=unix,addr.path=${BASH_REMATCH[2]}"
               -device "virtio-net-pci,netdev=n1,mac=${BASH_REMATCH[3]},romfile=")
fi

# --- the image --------------------------------------------------------------
[ -f "$IMAGE/image.env" ] || fatal "no image in $IMAGE (run tools/rxe-vm/build-image.sh $IMAGE)"
RXE_VM_KERNEL=
# shellcheck source=/dev/null
. "$IMAGE/image.env"
KERNEL=$IMAGE/$RXE_VM_KERNEL
INITRD=$IMAGE/initrd.cpio
if [ ! -s "$KERNEL" ] || [ ! -s "$INITRD" ]; then
    fatal "image in $IMAGE is incomplete (rerun build-image.sh)"
fi
QEMU=$(command -v qemu-system-x86_64) || fatal "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"

# --- the work folder and the share ------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX") || fatal "mktemp failed"
SHARE=$WORK/share
QPID=
TAILS=()

kill_qemu() {
    [ -n "$QPID" ] || return 0
    if kill -0 "$QPID" 2>/dev/null; then
        kill -TERM "$QPID" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$QPID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$QPID" 2>/dev/null
    fi
    wait "$QPID" 2>/dev/null
    QPID=
}
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
    kill_qemu
    local t
    for t in "${TAILS[@]}"; do kill "$t" 2>/dev/null; wait "$t" 2>/dev/null; done
    TAILS=()
    if [ "$KEEP" = 1 ]; then
        msg "work folder kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'msg "interrupted"; exit 130' INT
trap 'msg "terminated"; exit 143' TERM HUP

mkdir -p "$SHARE/bin" "$SHARE/lib" "$SHARE/out" || fatal "cannot create $SHARE"

declare -A IMAGE_LIBS=()
if [ -f "$IMAGE/image-libs.txt" ]; then
    while read -r l; do [ -n "$l" ] && IMAGE_LIBS[$l]=1; done <"$IMAGE/image-libs.txt"
fi

add_libs() { # FILE: copy the libraries it needs that the image lacks
    local out name arrow path rest
    out=$(LC_ALL=C ldd "$1" 2>&1) || return 0   # static or not an ELF: nothing to add
    while read -r name arrow path rest; do
        [ "$arrow" = "=>" ] || continue
        if [ "$path" = "not" ]; then
            fatal "$1 needs $name, which the host does not have either"
        fi
        [ -n "${IMAGE_LIBS[$name]:-}" ] && continue
        [ -e "$SHARE/lib/$name" ] && continue
        cp -L "$path" "$SHARE/lib/$name" || fatal "cannot copy $path"
        [ "$VERBOSE" = 1 ] && msg "adding $path for $(basename "$1")"
    done <<<"$out"
    : "$rest"
}

for f in "${BINS[@]}"; do
    [ -f "$f" ] || fatal "--bin $f: no such file"
    name=$(basename "$f")
    [ -e "$SHARE/bin/$name" ] && fatal "--bin $f: a file named $name is already shared"
    cp -L --preserve=mode "$f" "$SHARE/bin/$name" || fatal "cannot copy $f"
    add_libs "$f"
done

{
    echo '#!/bin/bash'
    echo '# Written by tools/rxe-vm/run.sh.'
    echo 'cd /job || exit 125'
    echo 'export PATH=/job/bin:/usr/sbin:/usr/bin'
    echo 'export LD_LIBRARY_PATH=/job/lib'
    echo 'export HOME=/root TMPDIR=/tmp'
    for e in "${ENVS[@]}"; do
        printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"
    done
    printf 'exec'
    printf ' %q' "$@"
    printf '\n'
} >"$SHARE/job.sh"
# The guest's own last-resort limit; the host watchdog below is the real one.
echo $((TIMEOUT + 30)) >"$SHARE/timeout"

# --- boot -------------------------------------------------------------------
CONSOLE=$WORK/console.log
: >"$WORK/stdout"
: >"$WORK/stderr"
START=$EPOCHREALTIME
"$QEMU" -nodefaults -no-user-config -display none -monitor none -no-reboot \
    -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP" -M pc \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 quiet panic=1 mitigations=off${KARGS:+ $KARGS}" \
    -serial "file:$CONSOLE" \
    -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,romfile= \
    "${LINK_ARGS[@]}" \
    -virtfs "local,path=$SHARE,mount_tag=job,security_model=none,id=job" \
    -device virtio-serial-pci,id=vs0 \
    -chardev "file,id=jout,path=$WORK/stdout,append=on" \
    -device virtserialport,bus=vs0.0,chardev=jout,name=rxe-vm.stdout \
    -chardev "file,id=jerr,path=$WORK/stderr,append=on" \
    -device virtserialport,bus=vs0.0,chardev=jerr,name=rxe-vm.stderr \
    </dev/null >"$WORK/qemu.log" 2>&1 &
QPID=$!

# Stream the guest command's output as it comes.
tail -c +1 -s 0.2 -f --pid="$QPID" "$WORK/stdout" &
TAILS+=($!)
tail -c +1 -s 0.2 -f --pid="$QPID" "$WORK/stderr" >&2 &
TAILS+=($!)

secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# --- watchdog -----------------------------------------------------------------
DEADLINE=$((SECONDS + TIMEOUT))
TIMED_OUT=0
BOOTED=
while kill -0 "$QPID" 2>/dev/null; do
    if [ -z "$BOOTED" ] && [ -e "$SHARE/out/ready" ]; then
        BOOTED=$(secs_since "$START")
    fi
    if [ "$SECONDS" -ge "$DEADLINE" ]; then
        TIMED_OUT=1
        break
    fi
    sleep 0.2
done
if [ -z "$BOOTED" ] && [ -e "$SHARE/out/ready" ]; then
    BOOTED=$(secs_since "$START")
fi
kill_qemu
TOTAL=$(secs_since "$START")
for t in "${TAILS[@]}"; do wait "$t" 2>/dev/null; done
TAILS=()

console_tail() {
    msg "---- guest console (last 40 lines) ----"
    if [ -s "$CONSOLE" ]; then
        tail -n 40 "$CONSOLE" >&2
    else
        msg "(empty: the kernel printed nothing yet; try --kernel-args loglevel=7)"
    fi
    if [ -s "$WORK/qemu.log" ]; then
        msg "---- qemu ----"
        tail -n 20 "$WORK/qemu.log" >&2
    fi
    msg "----"
}

GUEST_UP=$(cat "$SHARE/out/ready" 2>/dev/null)
if [ "$VERBOSE" = 1 ]; then
    msg "boot to ready: ${BOOTED:-never} s on the host (guest uptime ${GUEST_UP:-?} s); total ${TOTAL} s"
fi

if [ "$TIMED_OUT" = 1 ]; then
    if [ -e "$SHARE/out/ready" ]; then
        msg "timeout: the command ran past ${TIMEOUT} s; QEMU killed"
        exit 124
    fi
    msg "timeout: the guest did not boot within ${TIMEOUT} s; QEMU killed"
    console_tail
    exit 125
fi
if [ -s "$SHARE/out/harness-error" ]; then
    msg "guest setup failed: $(cat "$SHARE/out/harness-error")"
    console_tail
    exit 125
fi
RC=$(cat "$SHARE/out/rc" 2>/dev/null)
if ! [[ $RC =~ ^[0-9]+$ ]]; then
    if [ -e "$SHARE/out/ready" ]; then
        msg "the guest gave no exit code (crashed or powered off during the command)"
    else
        msg "the guest did not boot"
    fi
    console_tail
    exit 125
fi
exit "$RC"
