#!/bin/bash
# guest-lib.sh: shell functions shared by the scripts that run INSIDE the rxe-vm
# guest (guest-selftest.sh, guest-vm-test.sh). Source it; it does nothing alone.
# Callers set WORK (a scratch folder), PORT (the TCP port the server listens on)
# and STEP_TIMEOUT (seconds per process) before calling pair.

passed=0
failed=0
pass() { echo "${PROG:-guest}: PASS $1"; passed=$((passed + 1)); }
fail() { echo "${PROG:-guest}: FAIL $1"; failed=$((failed + 1)); }
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

# Runs the array SRV in the background and the array CLI against it once the server
# listens on $PORT; both must exit 0. Output goes to $WORK/server.log and
# $WORK/client.log, and is printed.
pair() {
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

# perftest's result row: "#bytes #iterations t_min t_max t_typical t_avg ...".
# Prints t_typical for SIZE and ITERS when it is a positive number (perftest
# prints inf or 0.00 when its CPU clock estimate fails under emulation).
typical_lat() { # LOG SIZE ITERS
    awk -v s="$2" -v n="$3" \
        '$1 == s && $2 == n && $5 ~ /^[0-9.]+$/ && $5 + 0 > 0 { print $5; found = 1 }
         END { exit !found }' "$1"
}
