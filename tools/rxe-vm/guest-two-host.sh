#!/bin/bash
# guest-two-host.sh server|client: one end of the two-host run (two-host.sh), INSIDE
# a guest whose eth1 is a private link to the other guest. Each guest has its own
# soft-RoCE device on eth1 (rxe1): the RPCs cross a real (emulated) Ethernet link
# between two kernels; no shared memory, no loopback.
#
# server: 192.168.77.1, `rpcrdma serve --provider verbs` counting executions, until
#         the host stops the guest.
# client: 192.168.77.2, waits for the server, then `rpcrdma call` of every message
#         form, `rpcrdma sweep` over ops, sizes and forced forms (every form seen in
#         the counters), `bench rpc`, and a fault run (connections dropped with
#         rdma_disconnect, every RPC exactly once). Exit status 0 when all passed.

set -uo pipefail
PROG=two-host
# shellcheck source=guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"

SERVER_IP=192.168.77.1
CLIENT_IP=192.168.77.2
PORT=20049

link_up() { # ADDR: eth1 up with ADDR/24 and rxe1 on it
    ip addr add "$1/24" dev eth1 && ip link set eth1 up \
        && rdma link add rxe1 type rxe netdev eth1
}

case "${1:-}" in
server)
    link_up "$SERVER_IP" || { echo "$PROG: no eth1 link"; exit 1; }
    echo "$PROG: server on $SERVER_IP:$PORT (rxe1)"
    exec rpcrdma serve --provider verbs --device rxe1 --listen "$SERVER_IP:$PORT" \
        --count-executions --seconds "${SERVE_SECONDS:-1500}"
    ;;
client) ;;
*) echo "usage: $0 server|client" >&2; exit 2 ;;
esac

link_up "$CLIENT_IP" || { echo "$PROG: no eth1 link"; exit 1; }
C=(--provider verbs --device rxe1 --connect "$SERVER_IP:$PORT")

# The server's guest boots beside this one: wait for its answer (at most 240 s).
up=0
for _ in $(seq 1 240); do
    if timeout 10 rpcrdma call "${C[@]}" --workload null >/dev/null 2>&1; then
        up=1
        break
    fi
    sleep 1
done
if [ "$up" != 1 ]; then
    fail "the server on $SERVER_IP answered no NULL within 240 s"
    ip addr show eth1
    rdma link show
    exit 1
fi
pass "the server on the other guest answers"

# A counter's value in a JSON text (the last occurrence).
counter() { grep -o "\"$1\":[0-9]*" | tail -n 1 | cut -d: -f2; }
# The sum of a counter's values over JSON lines.
total() { grep -o "\"$1\":[0-9]*" | cut -d: -f2 | awk '{ s += $1 } END { print s + 0 }'; }

banner "every message form, one call each way (rpcrdma call)"
# Workload, then the counter that proves its form.
for spec in null:short_calls echo:3000:short_replies echo:200000:long_calls \
    echo:200000:long_replies write:64k:chunked_calls write:1m:chunked_calls \
    read:64k:write_chunks read:1m:write_chunks; do
    w=${spec%:*}
    c=${spec##*:}
    # Each call may take 30 s: a MiB over two emulated guests' link took 2.3-4.8 s at
    # times, past `call`'s default of 5 s (a correctness check, not a speed one).
    if out=$(timeout 200 rpcrdma call "${C[@]}" --workload "$w" --count 3 --timeout-ms 30000 2>&1) \
        && [ "$(echo "$out" | grep -c '"status":"ok"')" = 3 ] \
        && [ "$(echo "$out" | counter "$c")" -gt 0 ]; then
        pass "call $w ($c $(echo "$out" | counter "$c"))"
    else
        fail "call $w: $out"
    fi
done

banner "rpcrdma sweep across the link"
# (The guest has no /dev/fd: its output is kept with tee, not process substitution.)
timeout 600 rpcrdma sweep "${C[@]}" --op null,echo,read,write --sizes 512,64k \
    --force-form auto,chunked,long --reps 1 --seconds 0.3 --warmup 0.05 \
    --json /tmp/sweep.json 2>&1 | tee /tmp/sweep.out
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    n=$(wc -l </tmp/sweep.json)
    missing=
    for f in short_calls chunked_calls long_calls short_replies long_replies write_chunks; do
        [ "$(total "$f" </tmp/sweep.json)" -gt 0 ] || missing="$missing $f"
    done
    if [ "$n" -gt 0 ] && [ -z "$missing" ]; then
        pass "sweep: $n points, every form seen"
    else
        fail "sweep: $n points, never seen:$missing"
    fi
else
    fail "sweep failed"
    tail -n 12 /tmp/sweep.out
fi

banner "bench rpc across the link"
if out=$(timeout 120 rpcrdma bench rpc "${C[@]}" --workload null,write:64k,read:64k \
    --depth 4 --seconds 1 --warmup 0.2 2>&1); then
    echo "$out"
    pass "bench rpc"
else
    fail "bench rpc"
    echo "$out"
fi

banner "a fault run: connections dropped with rdma_disconnect"
if out=$(timeout 180 rpcrdma bench rpc "${C[@]}" --workload echo:1k,write:64k --depth 4 \
    --seconds 3 --warmup 0.2 --disconnect-every 0.5 --retransmit 30 2>&1) \
    && [ "$(echo "$out" | grep -c ': every RPC completed')" = 2 ]; then
    echo "$out"
    pass "fault run: every RPC exactly once"
else
    fail "fault run"
    echo "$out"
fi

echo "$PROG: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
