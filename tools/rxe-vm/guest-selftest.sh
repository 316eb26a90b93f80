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

passed=0
failed=0
pass() { echo "selftest: PASS $1"; passed=$((passed + 1)); }
fail() { echo "selftest: FAIL $1"; failed=$((failed + 1)); }
banner() { printf '\n== %s\n' "$1"; }

# Waits until a TCP port listens (IPv4 or IPv6), at most 20 s.
wait_listen() { # PORT
    local hex i
    hex=$(printf ':%04X ' "$1")
    for ((i = 0; i < 200; i++)); do
        if grep -q "${hex}[0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# Runs SERVER_CMD in the background and CLIENT_CMD against it; both must exit 0.
# Server output goes to $WORK/server.log, client output to $WORK/client.log.
WORK=$(mktemp -d)
pair() { # "SERVER ARGS" -- "CLIENT ARGS" (as arrays via globals SRV and CLI)
    local srv_pid srv_rc cli_rc
    timeout "$STEP_TIMEOUT" "${SRV[@]}" >"$WORK/server.log" 2>&1 &
    srv_pid=$!
    if ! wait_listen "$PORT"; then
        echo "server did not listen on port $PORT:"
        kill "$srv_pid" 2>/dev/null
        wait "$srv_pid" 2>/dev/null
        cat "$WORK/server.log"
        return 1
    fi
    timeout "$STEP_TIMEOUT" "${CLI[@]}" >"$WORK/client.log" 2>&1
    cli_rc=$?
    wait "$srv_pid"
    srv_rc=$?
    echo "-- server ($srv_rc): ${SRV[*]}"
    cat "$WORK/server.log"
    echo "-- client ($cli_rc): ${CLI[*]}"
    cat "$WORK/client.log"
    [ "$srv_rc" -eq 0 ] && [ "$cli_rc" -eq 0 ]
}

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

# perftest's result row: "#bytes #iterations t_min t_max t_typical t_avg ...".
# Prints t_typical when it is a positive number (perftest prints inf or 0.00
# when its CPU clock estimate fails under emulation).
typical_lat() { # LOG
    awk '$1 == "64" && $2 == "1000" && $5 ~ /^[0-9.]+$/ && $5 + 0 > 0 { print $5; found = 1 }
         END { exit !found }' "$1"
}

banner "ib_send_lat -d $DEV -x 1 -n 1000 -s 64"
SRV=(ib_send_lat -d "$DEV" -x 1 -n 1000 -s 64)
CLI=(ib_send_lat -d "$DEV" -x 1 -n 1000 -s 64 "$IP")
ok=0
for attempt in 1 2; do
    if pair && lat=$(typical_lat "$WORK/client.log"); then
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
