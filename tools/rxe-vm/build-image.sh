#!/bin/bash
# build-image.sh OUTDIR
#
# Builds the soft-RoCE guest image used by run.sh: Debian's own kernel (not
# installed on the host, only unpacked) and an uncompressed cpio initramfs that
# holds static busybox, bash, iproute2 (ip, rdma), kmod, the verbs/perftest
# tools, the libraries they need, the rxe provider, the RDMA/virtio/9p kernel
# modules and the guest /init. The binaries under test are NOT in the image:
# run.sh hands them to the guest through a 9p share at run time. Two third-party
# NFS test suites are (guest-nfs-suites.sh): pjdfstest, from the crate registry
# (`cargo install`, once), and the Connectathon tests (cthon04), built static
# from their sources (CTHON04_SRC, default ../shared/peer-suites/cthon04-src beside
# the checkout, else a clone of the public mirror), once.
#
# Outputs in OUTDIR:
#   vmlinux or vmlinuz   kernel to boot (uncompressed ELF when it can be made)
#   initrd.cpio          uncompressed initramfs
#   image.env            facts for run.sh (kernel version, kernel file name)
#   image-libs.txt       sonames of the libraries in the image
#   pjdfstest/           cargo install root of pjdfstest (bin/pjdfstest)
#   cthon04/             the cthon04 tests, built static (basic, special, lock)
#   scratch/             downloaded .deb, unpacked kernel, image tree (cache;
#                        safe to delete once the outputs exist)
#
# Re-running with an unchanged OUTDIR only checks and returns. Delete OUTDIR to
# pick up a newer kernel package.
#
# Exit codes: 0 ok, 1 build error, 2 usage, 3 packages missing and not root.

set -euo pipefail

PROG=build-image
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ $# -ne 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi

SELF=$(readlink -f "${BASH_SOURCE[0]}")
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
SCRATCH=$OUT/scratch
mkdir -p "$SCRATCH"

# One build per OUTDIR at a time.
exec 9>"$OUT/.lock"
if ! flock -n 9; then
    log "waiting for another build of $OUT"
    flock 9
fi

export LC_ALL=C
# cargo (for pjdfstest) lives in the caller's PATH, often ~/.cargo/bin.
HOST_CARGO=$(command -v "${CARGO:-cargo}" 2>/dev/null || true)
[ -n "$HOST_CARGO" ] || [ ! -x "${HOME:-/nonexistent}/.cargo/bin/cargo" ] || HOST_CARGO=$HOME/.cargo/bin/cargo
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

T0=$EPOCHREALTIME
elapsed() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------
# 1. Host packages
# ---------------------------------------------------------------------------
PKGS=(qemu-system-x86 busybox-static cpio kmod iproute2 rdma-core
      ibverbs-providers ibverbs-utils rdmacm-utils perftest
      libibverbs1 librdmacm1 xz-utils
      nfs-kernel-server nfs-common rpcbind util-linux coreutils diffutils findutils)

missing_pkgs() {
    local p status
    for p in "${PKGS[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        case $status in
            ii*) ;;
            *) printf '%s\n' "$p" ;;
        esac
    done
}

mapfile -t MISSING < <(missing_pkgs)
if [ ${#MISSING[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "these Debian packages are missing: ${MISSING[*]}"
        log "install them as root with:"
        log "  apt-get update && apt-get install -y --no-install-recommends ${MISSING[*]}"
        exit 3
    fi
    log "installing: ${MISSING[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${MISSING[@]}" >"$SCRATCH/apt.log" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        apt-get update -q >>"$SCRATCH/apt.log" 2>&1 || { tail -n 20 "$SCRATCH/apt.log" >&2; die "apt-get update failed"; }
        apt-get install -y -q --no-install-recommends "${MISSING[@]}" >>"$SCRATCH/apt.log" 2>&1 \
            || { tail -n 20 "$SCRATCH/apt.log" >&2; die "apt-get install failed (log: $SCRATCH/apt.log)"; }
    fi
    mapfile -t MISSING < <(missing_pkgs)
    [ ${#MISSING[@]} -eq 0 ] || die "still missing after install: ${MISSING[*]}"
    log "packages installed ($(elapsed) s)"
fi

# ---------------------------------------------------------------------------
# 2. Kernel package (downloaded, never installed)
# ---------------------------------------------------------------------------
DEBDIR=$SCRATCH/debs
mkdir -p "$DEBDIR"
shopt -s nullglob
debs=("$DEBDIR"/linux-image-*.deb)
shopt -u nullglob

KVER=
if [ ${#debs[@]} -gt 1 ]; then
    die "more than one kernel package in $DEBDIR; delete all but one"
elif [ ${#debs[@]} -eq 1 ]; then
    KDEB=${debs[0]}
else
    kpkg_name() {
        apt-cache depends linux-image-amd64 2>/dev/null \
            | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
    }
    KPKG=$(kpkg_name)
    if [ -z "$KPKG" ] && [ "$(id -u)" -eq 0 ]; then
        log "linux-image-amd64 unknown to apt-cache; running apt-get update"
        apt-get update -q >>"$SCRATCH/apt.log" 2>&1 || die "apt-get update failed"
        KPKG=$(kpkg_name)
    fi
    [ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 to a kernel package (try apt-get update)"
    log "downloading $KPKG"
    dl=$(mktemp -d "$DEBDIR/dl.XXXXXX")
    sandbox=()
    # apt's _apt sandbox user cannot write into a root-owned folder.
    [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
    (cd "$dl" && apt-get download -q "${sandbox[@]}" "$KPKG") >>"$SCRATCH/apt.log" 2>&1 \
        || { rm -rf "$dl"; tail -n 20 "$SCRATCH/apt.log" >&2; die "apt-get download $KPKG failed"; }
    for f in "$dl"/*.deb; do mv "$f" "$DEBDIR/"; done
    rmdir "$dl"
    debs=("$DEBDIR"/linux-image-*.deb)
    KDEB=${debs[0]}
    log "downloaded $(basename "$KDEB") ($(elapsed) s)"
fi
KPKG=$(dpkg-deb -f "$KDEB" Package)
KVER=${KPKG#linux-image-}
if [ -z "$KVER" ] || [ "$KVER" = "$KPKG" ]; then
    die "unexpected kernel package name: $KPKG"
fi

KROOT=$SCRATCH/kernel
unpack_kernel() {
    if [ ! -e "$KROOT/.unpacked" ]; then
        log "unpacking $(basename "$KDEB")"
        rm -rf "$KROOT" "$KROOT.tmp"
        dpkg-deb -x "$KDEB" "$KROOT.tmp"
        mv "$KROOT.tmp" "$KROOT"
        touch "$KROOT/.unpacked"
    fi
    if [ ! -s "$KROOT/lib/modules/$KVER/modules.dep" ]; then
        log "depmod for $KVER"
        depmod -b "$KROOT" "$KVER"
    fi
}

# ---------------------------------------------------------------------------
# 3. Kernel to boot: the ELF vmlinux unpacked from the bzImage when the kernel
#    has CONFIG_PVH (QEMU's -kernel then boots it directly), else the bzImage.
# ---------------------------------------------------------------------------

# Reads the bzImage setup header (boot protocol >= 2.08): setup_sects at 0x1f1,
# payload_offset/payload_length at 0x248/0x24c, relative to the protected-mode
# code that starts after the setup sectors.
extract_vmlinux() { # BZIMAGE OUTFILE
    local img=$1 out=$2 sects off len magic start
    sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$img" | tr -d ' ')
    [ "$sects" -eq 0 ] && sects=4
    read -r off len < <(od -An -tu4 -j $((0x248)) -N8 "$img")
    if [ -z "$off" ] || [ -z "$len" ] || [ "$len" -eq 0 ]; then
        return 1
    fi
    start=$(( (sects + 1) * 512 + off ))
    magic=$(tail -c +$((start + 1)) "$img" | head -c 6 | od -An -tx1 | tr -d ' \n')
    local -a dec
    case $magic in
        fd377a585a00*) dec=(xz -dc --single-stream) ;;
        1f8b*)         dec=(gzip -dc) ;;
        28b52ffd*)     dec=(zstd -dcq) ;;
        5d0000*)       dec=(xz -dc --format=lzma --single-stream) ;;
        425a68*)       dec=(bzip2 -dc) ;;
        02214c18*)     dec=(lz4 -dc) ;;
        *) log "unknown kernel payload compression (magic $magic)"; return 1 ;;
    esac
    command -v "${dec[0]}" >/dev/null || { log "no ${dec[0]} to unpack the kernel"; return 1; }
    # The payload ends with a 4-byte size that the decompressors may call trailing garbage.
    tail -c +$((start + 1)) "$img" | head -c "$len" | "${dec[@]}" >"$out.tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' \n')" != 7f454c46 ]; then
        rm -f "$out.tmp"
        return 1
    fi
    mv "$out.tmp" "$out"
}

if [ ! -s "$OUT/vmlinux" ] && [ ! -s "$OUT/vmlinuz" ]; then
    unpack_kernel
    BZ=$KROOT/boot/vmlinuz-$KVER
    [ -s "$BZ" ] || die "no $BZ in the kernel package"
    if grep -qx 'CONFIG_PVH=y' "$KROOT/boot/config-$KVER" && extract_vmlinux "$BZ" "$OUT/vmlinux"; then
        log "kernel: ELF vmlinux ($(du -m --apparent-size "$OUT/vmlinux" | cut -f1) MB, PVH boot)"
    else
        log "kernel: could not get an ELF vmlinux; booting the bzImage"
        cp "$BZ" "$OUT/vmlinuz"
    fi
fi
if [ -s "$OUT/vmlinux" ]; then KFILE=vmlinux; else KFILE=vmlinuz; fi

# ---------------------------------------------------------------------------
# 3b. Third-party NFS test suites, cached in OUTDIR (guest-nfs-suites.sh runs
#     them). One that cannot be had leaves the image without it, with the reason
#     in the image's /etc/rxe-vm/suites-missing, which the guest reports as a
#     failed check; the next run tries again.
# ---------------------------------------------------------------------------
PJDFSTEST_VERSION=0.2.2
PJD_ROOT=$OUT/pjdfstest
CTHON=$OUT/cthon04
# The project's shared/ folder stands beside its checkout (CI's clone included).
SHARED_DIR=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../../shared" 2>/dev/null && pwd)
CTHON04_SRC=${CTHON04_SRC:-${SHARED_DIR:-/work/shared}/peer-suites/cthon04-src}
CTHON04_GIT=https://github.com/ckripto/cthon04
CTHON04_COMMIT=d246a59
SUITES_MISSING=()

# pjdfstest, the Rust port of pjd's POSIX file system tests: `cargo install
# --locked` into OUTDIR/pjdfstest, once (about 75 s on 2 cores).
install_pjdfstest() {
    local log_file=$SCRATCH/pjdfstest-install.log
    if [ -x "$PJD_ROOT/bin/pjdfstest" ] \
       && grep -q "^\"pjdfstest $PJDFSTEST_VERSION " "$PJD_ROOT/.crates.toml" 2>/dev/null; then
        return 0
    fi
    if [ -z "$HOST_CARGO" ]; then
        SUITES_MISSING+=("pjdfstest: no cargo on this machine to install it")
        return 1
    fi
    log "cargo install pjdfstest $PJDFSTEST_VERSION (once)"
    # Its own target folder: never the workspace's (CARGO_TARGET_DIR) and its lock.
    if env -u CARGO_TARGET_DIR PATH="$(dirname "$HOST_CARGO"):$PATH" \
        "$HOST_CARGO" install pjdfstest --version "$PJDFSTEST_VERSION" --locked \
        --root "$PJD_ROOT" --target-dir "$SCRATCH/pjdfstest-build" >"$log_file" 2>&1; then
        rm -rf "$SCRATCH/pjdfstest-build"
        log "pjdfstest installed ($(elapsed) s)"
        return 0
    fi
    tail -n 20 "$log_file" >&2
    SUITES_MISSING+=("pjdfstest: cargo install pjdfstest --version $PJDFSTEST_VERSION --locked failed (log: $log_file)")
    return 1
}

# cthon04, built static (the guest has no libc to spare for it and no compiler):
# basic, special and lock, laid out as `make copy` lays them out, plus the
# top-level runtests and tests.init, in OUTDIR/cthon04. Once: delete the folder to
# rebuild.
build_cthon04() {
    local src=$SCRATCH/cthon04-src log_file=$SCRATCH/cthon04-build.log d libs
    [ -e "$CTHON/.built" ] && return 0
    rm -rf "$src" "$CTHON.tmp"
    : >"$log_file"
    if [ -f "$CTHON04_SRC/basic/test1.c" ]; then
        if ! cp -r "$CTHON04_SRC" "$src" || ! chmod -R u+w "$src"; then
            SUITES_MISSING+=("cthon04: cannot copy $CTHON04_SRC")
            return 1
        fi
        echo "source $CTHON04_SRC" >"$src/.origin"
    elif command -v git >/dev/null \
         && timeout 120 git clone -q "$CTHON04_GIT" "$src" >>"$log_file" 2>&1 \
         && git -C "$src" checkout -q "$CTHON04_COMMIT" >>"$log_file" 2>&1; then
        echo "source $CTHON04_GIT $CTHON04_COMMIT" >"$src/.origin"
    else
        rm -rf "$src"
        SUITES_MISSING+=("cthon04: no sources (no $CTHON04_SRC, and git clone $CTHON04_GIT failed; set CTHON04_SRC)")
        return 1
    fi
    if ! command -v gcc >/dev/null || ! command -v make >/dev/null; then
        SUITES_MISSING+=("cthon04: gcc and make are needed to build it (build-essential)")
        return 1
    fi
    log "building cthon04 (static, once)"
    mkdir -p "$CTHON.tmp"/{basic,special,lock}
    (cd "$src" && sh ./tests.init.sh) >>"$log_file" 2>&1
    for d in basic special lock; do
        libs=
        [ "$d" = lock ] && libs=-lm
        if ! make -C "$src/$d" CC=gcc LIBS="$libs" \
                CFLAGS="-DLINUX -DHAVE_SOCKLEN_T -DGLIBC=22 -DMMAP -DSTDARG -O2 -static" \
                >>"$log_file" 2>&1 \
           || ! make -C "$src/$d" copy CC=gcc LIBS="$libs" DESTDIR="$CTHON.tmp/$d" >>"$log_file" 2>&1; then
            tail -n 20 "$log_file" >&2
            SUITES_MISSING+=("cthon04: the $d tests did not build (log: $log_file)")
            return 1
        fi
    done
    cp "$src/runtests" "$src/tests.init" "$CTHON.tmp/"
    local f
    while IFS= read -r -d '' f; do
        if [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
            strip "$f" 2>/dev/null || true
        fi
    done < <(find "$CTHON.tmp" -type f -print0)
    chmod -R a+rX,u+w "$CTHON.tmp"
    cat "$src/.origin" >"$CTHON.tmp/.built"
    rm -rf "$CTHON"
    mv "$CTHON.tmp" "$CTHON"
    rm -rf "$src"
    log "cthon04 built ($(elapsed) s)"
}

install_pjdfstest || log "warning: ${SUITES_MISSING[-1]}"
build_cthon04 || log "warning: ${SUITES_MISSING[-1]}"

# ---------------------------------------------------------------------------
# 4. Initramfs
# ---------------------------------------------------------------------------

# Modules loaded by the guest /init, by their dependency closure.
MODULES=(virtio_pci virtio_net virtio_console 9pnet_virtio 9p
         crc32_generic rdma_rxe ib_uverbs rdma_ucm rdma_cm iw_cm ib_cm
         ip6_udp_tunnel udp_tunnel)
# Kernel side of the NFS/RDMA peers, client and server (not loaded by /init; the NFS
# tests load them: guest-nfs.sh).
MODULES_NFS=(rpcrdma nfsd nfs nfsv3 nfsv4)

# Commands copied from the host with every library ldd lists for them.
TOOLS=(bash ip rdma kmod modprobe insmod rmmod lsmod modinfo
       ibv_devices ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong
       rping ucmatose rdma_server rdma_client
       ib_send_lat ib_write_lat ib_read_lat ib_send_bw ib_write_bw ib_read_bw
       rpcbind rpc.nfsd rpc.mountd exportfs mount.nfs umount.nfs mount umount
       dd sha256sum diff cmp cp find ls sync stat sort wc seq head tail
       mkdir rm mv ln readlink cat timeout date touch xargs dmesg
       sleep setpriv)
RXE_PROVIDER=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
RXE_DRIVER=/etc/libibverbs.d/rxe.driver
BUSYBOX=/bin/busybox

# The image is rebuilt when this script, the kernel or a package changes.
image_key() {
    {
        sha256sum "$SELF"
        echo "kernel $KVER"
        dpkg-query -W -f='${Package} ${Version}\n' "${PKGS[@]}" libc6 bash 2>/dev/null
        # The suites: present or not, and which build.
        cat "$PJD_ROOT/.crates.toml" "$CTHON/.built" 2>/dev/null || true
        [ -x "$PJD_ROOT/bin/pjdfstest" ] && sha256sum "$PJD_ROOT/bin/pjdfstest"
        printf '%s\n' "${SUITES_MISSING[@]}"
    } | sha256sum | cut -d' ' -f1
}
KEY=$(image_key)

write_init() { # FILE
    cat >"$1" <<'INIT'
#!/bin/bash
# PID 1 of the rxe-vm guest (written by tools/rxe-vm/build-image.sh).
# Contract with run.sh: the 9p tag "job" is mounted on /job; /job/job.sh is run
# by bash in /job with stdout/stderr on the virtio ports rxe-vm.stdout and
# rxe-vm.stderr; its exit code goes to /job/out/rc; /job/out/ready holds the
# uptime when the job started; a setup failure goes to /job/out/harness-error.
export PATH=/usr/sbin:/usr/bin
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

say() { echo "rxe-vm-init: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
halt() {
    sync
    umount /job 2>/dev/null
    poweroff -f
    echo o >/proc/sysrq-trigger
    sleep 10
    exit 1
}
fail() {
    say "FATAL: $*"
    if grep -q ' /job 9p ' /proc/mounts; then
        mkdir -p /job/out
        echo "$*" >/job/out/harness-error
    fi
    halt
}

say "loading virtio modules"
modprobe -a virtio_pci virtio_net virtio_console 9pnet_virtio 9p \
    || fail "modprobe of the virtio/9p modules failed"
say "mounting the share"
mkdir -p /job
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job /job \
    || fail "cannot mount the 9p share 'job'"
mkdir -p /job/out
# From here on a failure is reported to the host through /job/out/harness-error.
say "loading RDMA modules"
modprobe -a crc32_generic rdma_rxe ib_uverbs rdma_ucm \
    || fail "modprobe of the RDMA modules failed: $(dmesg | tail -n 3 | tr '\n' ' ')"

say "configuring eth0 and rxe0"
ip link set lo up || fail "ip link set lo up failed"
ip addr add 10.0.2.15/24 dev eth0 || fail "no eth0 (virtio-net)"
ip link set eth0 up || fail "ip link set eth0 up failed"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"

# Wait until the port is active and GID 1 (::ffff:10.0.2.15) exists.
port=/sys/class/infiniband/rxe0/ports/1
for _ in $(seq 100); do
    if grep -q ACTIVE "$port/state" 2>/dev/null &&
       grep -q ':ffff:0a00:020f' "$port/gids/1" 2>/dev/null; then
        break
    fi
    sleep 0.1
done
grep -q ACTIVE "$port/state" 2>/dev/null || fail "rxe0 port not active: $(cat "$port/state" 2>&1)"

say "rxe0 is $(cat "$port/state")"
# Job output goes to the host through the named virtio-serial ports, each opened once.
out=/dev/console err=/dev/console
for _ in $(seq 50); do
    for d in /sys/class/virtio-ports/*; do
        [ -r "$d/name" ] || continue
        case $(cat "$d/name") in
            rxe-vm.stdout) out=/dev/${d##*/} ;;
            rxe-vm.stderr) err=/dev/${d##*/} ;;
        esac
    done
    [ "$out" != /dev/console ] && [ "$err" != /dev/console ] && break
    sleep 0.1
done
[ "$out" = /dev/console ] && say "no rxe-vm.stdout port: job output goes to the console"

[ -r /job/job.sh ] || fail "no /job/job.sh in the share"
limit=$(cat /job/timeout 2>/dev/null)
case $limit in ''|*[!0-9]*) limit=3600 ;; esac
ulimit -l unlimited
ulimit -c 0
cd /job || fail "cannot cd /job"
say "ready"
cut -d' ' -f1 /proc/uptime >/job/out/ready
# The host has its own watchdog; this one only makes sure the guest ends too.
timeout -s KILL "$limit" bash /job/job.sh </dev/null >"$out" 2>"$err"
rc=$?
echo "$rc" >/job/out/rc.tmp && mv /job/out/rc.tmp /job/out/rc
say "job exited with $rc"
cd /
halt
INIT
    chmod 755 "$1"
}

# Copies FILE (following symlinks) to the same path under the image root.
put() { # FILE [DEST_PATH]
    local src=$1 dst=${2:-$1}
    mkdir -p "$ROOT$(dirname "$dst")"
    cp -L --preserve=mode "$src" "$ROOT$dst"
}

# Lists the absolute library paths ldd resolves for FILE, the dynamic loader
# included. Plain fields, no \s (mawk does not know it).
ldd_paths() { # FILE
    local out
    out=$(ldd "$1" 2>&1) || { case $out in *"not a dynamic executable"*|*"statically linked"*) return 0 ;; esac
                              die "ldd $1: $out"; }
    if grep -q 'not found' <<<"$out"; then
        die "ldd $1: missing libraries: $(grep 'not found' <<<"$out" | tr '\n\t' '  ')"
    fi
    awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' <<<"$out"
}

build_initrd() {
    unpack_kernel
    ROOT=$SCRATCH/root
    log "assembling the image tree"
    rm -rf "$ROOT"
    mkdir -p "$ROOT"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,job,root,var/tmp,mnt}
    ln -s usr/bin "$ROOT/bin"
    ln -s usr/sbin "$ROOT/sbin"
    ln -s usr/lib "$ROOT/lib"
    ln -s usr/lib64 "$ROOT/lib64"
    chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp"

    # Commands at their canonical host paths, aliases (modprobe -> kmod) as symlinks.
    local t p real dir elfs=()
    for t in "${TOOLS[@]}"; do
        p=$(command -v "$t") || die "command not found on the host: $t"
        real=$(readlink -f "$p")
        [ -e "$ROOT$real" ] || { put "$real"; elfs+=("$real"); }
        dir=$(readlink -f "$(dirname "$p")")
        if [ "$dir/$t" != "$real" ] && [ ! -e "$ROOT$dir/$t" ]; then
            mkdir -p "$ROOT$dir"
            ln -s "$real" "$ROOT$dir/$t"
        fi
    done

    # The NFS test suites (guest-nfs-suites.sh): pjdfstest with its libraries,
    # the static cthon04 tree in /opt/cthon04.
    if [ -x "$PJD_ROOT/bin/pjdfstest" ]; then
        put "$PJD_ROOT/bin/pjdfstest" /usr/bin/pjdfstest
        elfs+=("$PJD_ROOT/bin/pjdfstest")
    fi
    if [ -e "$CTHON/.built" ]; then
        mkdir -p "$ROOT/opt"
        cp -r "$CTHON" "$ROOT/opt/cthon04"
    fi
    mkdir -p "$ROOT/etc/rxe-vm"
    printf '%s\n' "${SUITES_MISSING[@]}" | sed '/^$/d' >"$ROOT/etc/rxe-vm/suites-missing"

    # The rxe provider only.
    [ -f "$RXE_PROVIDER" ] || die "no $RXE_PROVIDER (ibverbs-providers)"
    [ -f "$RXE_DRIVER" ] || die "no $RXE_DRIVER (ibverbs-providers)"
    put "$RXE_PROVIDER"
    elfs+=("$RXE_PROVIDER")
    put "$RXE_DRIVER"

    # Every library ldd lists, the dynamic loader included.
    local libs lib
    libs=$(for t in "${elfs[@]}"; do ldd_paths "$t"; done | sort -u)
    [ -n "$libs" ] || die "ldd found no libraries"
    grep -q '/ld-linux' <<<"$libs" || die "the dynamic loader is not among the libraries"
    : >"$SCRATCH/image-libs.txt"
    while read -r lib; do
        put "$lib"
        basename "$lib" >>"$SCRATCH/image-libs.txt"
    done <<<"$libs"
    sort -u -o "$SCRATCH/image-libs.txt" "$SCRATCH/image-libs.txt"
    printf '%s\n' /usr/lib/x86_64-linux-gnu /usr/lib64 >"$ROOT/etc/ld.so.conf"
    ldconfig -r "$ROOT" 2>/dev/null || log "ldconfig -r failed (the loader's default paths still work)"

    # Static busybox, with applet links only where no real tool was copied.
    put "$BUSYBOX" /usr/bin/busybox
    local a name
    while read -r a; do
        name=${a##*/}
        if [ -e "$ROOT/usr/bin/$name" ] || [ -e "$ROOT/usr/sbin/$name" ]; then
            continue
        fi
        mkdir -p "$ROOT/$(dirname "$a")"
        ln -s /usr/bin/busybox "$ROOT/$a"
    done < <("$BUSYBOX" --list-full)
    [ -e "$ROOT/usr/bin/sh" ] || ln -s /usr/bin/busybox "$ROOT/usr/bin/sh"

    # Kernel modules: the dependency closure, then depmod for the image.
    local kmods m line ko n=0
    kmods=$(for m in "${MODULES[@]}" "${MODULES_NFS[@]}"; do
                modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" \
                    || die "module $m not found in $KVER"
            done | awk '$1 == "insmod" { print $2 }' | sort -u)
    local mdir=/lib/modules/$KVER
    while read -r ko; do
        [ -n "$ko" ] || continue
        line=${ko#"$KROOT"}
        mkdir -p "$ROOT$(dirname "$line")"
        cp "$ko" "$ROOT$line"
        n=$((n + 1))
    done <<<"$kmods"
    for m in modules.order modules.builtin modules.builtin.modinfo; do
        [ -f "$KROOT$mdir/$m" ] && cp "$KROOT$mdir/$m" "$ROOT$mdir/$m"
    done
    depmod -b "$ROOT" "$KVER"
    log "$n kernel modules"

    # Small /etc: the users rpcbind and the NFS tools switch to; pjdfstest's
    # nobody/nogroup and tests/tests; u1000 and u1001 for the identity checks
    # (guest-nfs-suites.sh); TI-RPC's netconfig.
    cat >"$ROOT/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/bash
_rpc:x:101:65534::/run/rpcbind:/usr/sbin/nologin
statd:x:102:65534::/var/lib/nfs:/usr/sbin/nologin
u1000:x:1000:1000:identity checks:/tmp:/bin/bash
u1001:x:1001:1001:identity checks:/tmp:/bin/bash
tests:x:1002:1002:pjdfstest:/tmp:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
    printf 'root:x:0:\nu1000:x:1000:\nu1001:x:1001:\ntests:x:1002:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
    local f
    for f in /etc/netconfig /etc/services /etc/protocols /etc/rpc; do
        [ -f "$f" ] && put "$f"
    done
    mkdir -p "$ROOT/var/lib/nfs/v4recovery" "$ROOT/run/rpcbind" "$ROOT/proc/fs/nfsd" "$ROOT/export"
    : >"$ROOT/etc/exports"
    printf '127.0.0.1\tlocalhost\n10.0.2.15\trxe-vm\n::1\tlocalhost ip6-localhost\n' >"$ROOT/etc/hosts"
    printf 'rxe-vm\n' >"$ROOT/etc/hostname"
    printf 'passwd: files\ngroup: files\nhosts: files\n' >"$ROOT/etc/nsswitch.conf"

    write_init "$ROOT/init"

    log "writing initrd.cpio"
    (cd "$ROOT" && find . -mindepth 1 -print0 | sort -z \
        | cpio --null -o -H newc -R 0:0 --quiet) >"$OUT/initrd.cpio.tmp"
    mv "$OUT/initrd.cpio.tmp" "$OUT/initrd.cpio"
    cp "$SCRATCH/image-libs.txt" "$OUT/image-libs.txt"
    printf '%s\n' "$KEY" >"$OUT/initrd.key"
}

if [ -s "$OUT/initrd.cpio" ] && [ -s "$OUT/image-libs.txt" ] \
   && [ "$(cat "$OUT/initrd.key" 2>/dev/null)" = "$KEY" ]; then
    log "initrd.cpio is up to date"
else
    build_initrd
fi

cat >"$OUT/image.env" <<EOF
RXE_VM_KVER=$KVER
RXE_VM_KERNEL=$KFILE
EOF

log "image ready in $OUT: $KFILE ($(du -m --apparent-size "$OUT/$KFILE" | cut -f1) MB), initrd.cpio ($(du -m --apparent-size "$OUT/initrd.cpio" | cut -f1) MB), kernel $KVER ($(elapsed) s)"
