#!/bin/bash
# guest-selftest.sh: runs INSIDE the rxe-vm guest (selftest.sh ships it there).
# Checks that soft-RoCE works: device listed, port active, an RC ping-pong and a
# perftest send-latency run between a server and a client in this one guest.
# Prints "selftest: N passed, N failed" last; exits 1 if anything failed.

set -u
IP=10.0.2.15
DEV=rxe0
PORT=18515          # default TCP port of ibv_rc_pingpong and perftest
STEP_TIMEOUT=120    # seconds, per server or client process

PROG=selftest
WORK=$(mktemp -d)
# shellcheck source=guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"

banner "ibv_devices"
if out=$(ibv_devices 2>&1); then
    echo "$out"
    if grep -qw "$DEV" <<<"$out"; then pass ibv_devices; else fail "ibv_devices (no $DEV)"; fi
else
    echo "$out"
    fail ibv_devices
fi

banner "ibv_devinfo -d $DEV"
if out=$(ibv_devinfo -d "$DEV" 2>&1); then
    echo "$out"
    if grep -q PORT_ACTIVE <<<"$out"; then pass ibv_devinfo; else fail "ibv_devinfo (port not active)"; fi
else
    echo "$out"
    fail ibv_devinfo
fi
echo "GID 1: $(cat /sys/class/infiniband/$DEV/ports/1/gids/1 2>/dev/null)"

banner "ibv_rc_pingpong -d $DEV -g 1"
SRV=(ibv_rc_pingpong -d "$DEV" -g 1)
CLI=(ibv_rc_pingpong -d "$DEV" -g 1 "$IP")
if pair; then pass ibv_rc_pingpong; else fail ibv_rc_pingpong; fi

banner "ib_send_lat -d $DEV -x 1 -n 1000 -s 64"
SRV=(ib_send_lat -d "$DEV" -x 1 -n 1000 -s 64)
CLI=(ib_send_lat -d "$DEV" -x 1 -n 1000 -s 64 "$IP")
ok=0
for attempt in 1 2; do
    if pair && lat=$(typical_lat "$WORK/client.log" 64 1000); then
        echo "ib_send_lat typical latency: $lat usec (attempt $attempt)"
        ok=1
        break
    fi
    echo "ib_send_lat attempt $attempt gave no usable latency"
done
if [ "$ok" = 1 ]; then pass ib_send_lat; else fail ib_send_lat; fi

rm -rf "$WORK"
echo
echo "selftest: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
