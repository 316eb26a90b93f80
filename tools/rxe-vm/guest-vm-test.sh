#!/bin/bash
# guest-vm-test.sh MODE: runs INSIDE the rxe-vm guest (vm-test.sh ships it there,
# with the rpcrdma binary). Real verbs on soft-RoCE (rxe0, 10.0.2.15).
#
#   test    rpcrdma devices lists rxe0; the fabric conformance suite passes on the
#           verbs provider; a short fabric ping-pong runs; serve/call of every form;
#           then the NFS part (guest-nfs.sh): the kernel's NFS client on nfs3d and on
#           the kernel's nfsd over RDMA; then cthon04 and pjdfstest on both, and
#           identity checks on default exports (guest-nfs-suites.sh; NFS_SUITES=0
#           skips them). Exits 1 if any failed.
#   bench   rpcrdma bench fabric (send, write, read; 8 B to 64 KiB) and perftest's
#           ib_send_lat / ib_write_lat / ib_read_lat at the same sizes, for
#           comparison in the same guest. Exits 1 if a run failed.
#
# Prints "vm-test: N passed, N failed" last.

set -u
MODE=${1:-test}
IP=10.0.2.15
DEV=rxe0
PORT=18515          # perftest's default TCP port
STEP_TIMEOUT=300    # seconds, per process

PROG=vm-test
WORK=$(mktemp -d)
# shellcheck source=guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"

# Runs a command with a timeout, printing it first; passes or fails the step NAME.
step() { # NAME CMD...
    local name=$1 rc
    shift
    banner "$*"
    timeout "$STEP_TIMEOUT" "$@"
    rc=$?
    if [ "$rc" -eq 0 ]; then pass "$name"; else fail "$name (exit $rc)"; fi
}

case "$MODE" in
test)
    banner "rpcrdma devices"
    if out=$(timeout 60 rpcrdma devices 2>&1) && grep -q "^$DEV:" <<<"$out"; then
        echo "$out"
        pass devices
    else
        echo "$out"
        fail "devices ($DEV not listed)"
    fi
    step conformance rpcrdma conformance --provider verbs --device "$DEV" --addr "$IP:18700"
    step bench-fabric-smoke rpcrdma bench fabric --provider verbs --device "$DEV" \
        --addr "$IP:18900" --op send --size 64 --iters 2000 --json
    # The engine end to end on real verbs: a server process, and a client process calling
    # every message form (data verified by the client), with and without remote
    # invalidation and with persistent registration.
    # Two modes call their clients back, reverse-direction ECHOs interleaved with the
    # forward Calls: in version 1 (RFC 8167's backward direction) and in version 2 (the
    # serve then accepts only that version).
    # The server takes every connection's receives from one shared receive queue by
    # default (rxe has them); the last mode gives each connection its own (--no-srq).
    for mode in "" "--no-remote-invalidation" "--persistent" "--version 1 --reverse 4" \
        "--version 2 --reverse 4" "--no-srq"; do
        # The version the mode asks for, which every call must report speaking.
        ver=$(sed -n 's/.*--version \([12]\).*/\1/p' <<<"$mode")
        banner "rpcrdma serve / call ${mode:-(windows, remote invalidation)}"
        SRV=(rpcrdma serve --provider verbs --device "$DEV" --listen "$IP:20049" --seconds 60 $mode)
        # Emptied first: the background start may truncate the log only after the wait
        # below has read the last mode's "listening" line (a loaded host lost that race,
        # and the first Calls found no listener).
        : >"$WORK/serve.log"
        timeout "$STEP_TIMEOUT" "${SRV[@]}" >"$WORK/serve.log" 2>&1 &
        srv=$!
        # Listening once it says so (under emulation start-up can take seconds).
        for _ in $(seq 300); do
            grep -q "^rpcrdma serve: program" "$WORK/serve.log" 2>/dev/null && break
            kill -0 "$srv" 2>/dev/null || break
            sleep 0.1
        done
        for w in null echo:100 echo:8000 write:100 write:64k read:100 read:64k; do
            if timeout 60 rpcrdma call --provider verbs --device "$DEV" --connect "$IP:20049" \
                --workload "$w" --count 3 $mode >"$WORK/call.log" 2>&1 \
                && { [[ -z "$ver" ]] || grep -q "\"rpcrdma_version\":$ver" "$WORK/call.log"; }; then
                pass "call $w $mode"
            else
                cat "$WORK/call.log"
                fail "call $w $mode"
            fi
        done
        if [[ "$mode" == --version* ]]; then
            # Forward load while the server keeps 4 reverse Calls outstanding on the
            # connection; every reverse result is checked by the server (reverse_bad).
            if timeout 60 rpcrdma bench rpc --provider verbs --device "$DEV" --connect "$IP:20049" \
                --workload null,read:4k --seconds 1 --warmup 0.2 --json $mode >"$WORK/bench-rev.log" 2>&1 \
                && grep -q '"reverse_calls":[1-9]' "$WORK/bench-rev.log" \
                && grep -q '"conn_lost":0' "$WORK/bench-rev.log"; then
                grep -o '"proc":"[a-z]*"\|"p50":[0-9]*\|"rate_rps":[0-9.]*\|"reverse_calls":[0-9]*' "$WORK/bench-rev.log" | paste -sd' '
                pass "bench rpc $mode: reverse Calls served under forward load"
            else
                cat "$WORK/bench-rev.log"
                # Which end ended the connection: the counters above (post_refused,
                # wc_errors, stalls), the server's below, and what the kernel saw.
                cat "$WORK/serve.log"
                dmesg | tail -20
                fail "bench rpc $mode"
            fi
        fi
        kill "$srv" 2>/dev/null
        wait "$srv" 2>/dev/null
        tail -3 "$WORK/serve.log"
        # Receives from the shared queue unless --no-srq, and no client ended for holding
        # more Calls than its grant there (credit_overruns) in any mode.
        if [[ "$mode" == *--no-srq* ]]; then
            want="receives per connection" what="a receive queue per connection"
        else
            want="shared receive queue(s) of" what="shared receive queues, one per worker"
        fi
        if grep -q "^rpcrdma serve: program.*$want" "$WORK/serve.log" \
            && grep -q '"credit_overruns":0' "$WORK/serve.log" \
            && ! grep -q '"credit_overruns":[1-9]' "$WORK/serve.log"; then
            pass "serve ${mode:-(default)}: $what, no credit overruns"
        else
            head -3 "$WORK/serve.log"
            fail "serve ${mode:-(default)}: $what, no credit overruns"
        fi
        grep -o '"registered":{[^}]*}' "$WORK/serve.log" | tail -1
        if [[ "$mode" == *--reverse* ]]; then
            if grep -q '"reverse_bad":0' "$WORK/serve.log" && grep -q '"reverse_replies":[1-9]' "$WORK/serve.log"; then
                pass "serve $mode: every reverse result right"
            else
                fail "serve $mode: reverse results"
            fi
        fi
    done
    step bench-rpc rpcrdma bench rpc --provider verbs --device "$DEV" --listen "$IP:20050" \
        --workload null,write:4k,read:4k --seconds 1 --warmup 0.2 --json
    # Several Calls in flight: corked Sends go out as lists of work requests on verbs too.
    step bench-rpc-depth8 rpcrdma bench rpc --provider verbs --device "$DEV" --listen "$IP:20051" \
        --workload null,echo:1k,write:4k --depth 8 --seconds 1 --warmup 0.2 --json
    # Version 2 against version 1 in the same run: null, and 4 KiB / 64 KiB chunked READ
    # and WRITE, with per-RPC invalidation (windows, remote invalidation), without it
    # (windows, local invalidation) and with persistent registration.
    step sweep-v1-v2 rpcrdma sweep --provider verbs --device "$DEV" --listen "$IP:20060" \
        --op null,read,write --sizes 4k,64k --force-form auto --version 1,2 \
        --registration windows,persistent --remote-invalidation on,off --reps 3 \
        --seconds 0.3 --warmup 0.1 --json "$WORK/sweep-v1-v2.json"
    [ -f "$WORK/sweep-v1-v2.json" ] && cat "$WORK/sweep-v1-v2.json"
    # The kernel as the peer: its NFS client on nfs3d and on its own nfsd (guest-nfs.sh).
    # shellcheck source=guest-nfs.sh
    . "$(dirname "$0")/guest-nfs.sh"
    nfs_tests
    # Suites nobody here wrote (cthon04, pjdfstest) on four servers: nfs3d's failures
    # among the kernel nfsd's over NFSv3, nfs4d's among the kernel nfsd's over NFSv4.1;
    # identity checks on default exports (guest-nfs-suites.sh).
    if [ "${NFS_SUITES:-1}" = 1 ]; then
        # shellcheck source=guest-nfs-suites.sh
        . "$(dirname "$0")/guest-nfs-suites.sh"
        nfs_suites
        nfs_identity
    fi
    ;;
bench)
    # Each round measures every operation and size with the engine's verbs fabric and with
    # perftest's ib_*_lat on the same device, back to back, the one going first alternating
    # from round to round (this host's speed changes within seconds: only ratios of
    # neighbouring runs mean something). The log ends with the medians of the two, the
    # ratio of the medians and the median of the per-round ratios. Both report the same
    # sample: half a round trip for SEND and WRITE, a whole one for READ.
    read -r -a SIZES <<<"${SIZES:-8 64 512 4096 65536}"
    read -r -a OPS <<<"${OPS:-send write read}"
    ITERS=${ITERS:-5000}
    ROUNDS=${ROUNDS:-3}
    : >"$WORK/lat.tsv"
    # One engine run of OP at size S, its p50 in microseconds appended to lat.tsv.
    engine_lat() { # ROUND OP S
        local out ns
        banner "rpcrdma bench fabric --op $2 --size $3"
        if out=$(timeout "$STEP_TIMEOUT" rpcrdma bench fabric --provider verbs --device "$DEV" \
            --addr "$IP:18900" --op "$2" --size "$3" --iters "$ITERS" --json 2>&1) &&
            ns=$(sed -n 's/.*"p50":\([0-9]*\),.*/\1/p' <<<"$out" | head -1) && [ -n "$ns" ]; then
            echo "$out"
            printf 'rpcrdma\t%s\t%s\t%s\t%s\n' "$2" "$3" \
                "$(awk -v v="$ns" 'BEGIN { printf "%.3f", v / 1000 }')" "$1" >>"$WORK/lat.tsv"
            pass "rpcrdma-$2-$3 round $1"
        else
            echo "$out"
            fail "rpcrdma-$2-$3 round $1"
        fi
    }
    # One perftest run of OP at size S, its typical latency appended to lat.tsv.
    perftest_lat() { # ROUND OP S
        local lat
        banner "ib_${2}_lat -s $3 -n $ITERS"
        SRV=("ib_${2}_lat" -d "$DEV" -x 1 -n "$ITERS" -s "$3")
        CLI=("ib_${2}_lat" -d "$DEV" -x 1 -n "$ITERS" -s "$3" "$IP")
        if pair >/dev/null && lat=$(typical_lat "$WORK/client.log" "$3" "$ITERS"); then
            echo "ib_${2}_lat $3 B: t_typical $lat usec"
            printf 'perftest\t%s\t%s\t%s\t%s\n' "$2" "$3" "$lat" "$1" >>"$WORK/lat.tsv"
            pass "ib_${2}_lat-$3 round $1"
        elif grep -q "^ *$3  *$ITERS  *inf" "$WORK/client.log"; then
            # perftest ran but its CPU clock estimate failed under emulation: no sample this
            # round (the medians take the others).
            echo "ib_${2}_lat $3 B: perftest printed inf (its clock estimate failed); no sample"
        else
            cat "$WORK/client.log"
            fail "ib_${2}_lat-$3 round $1"
        fi
    }
    for ((r = 1; r <= ROUNDS; r++)); do
        banner "round $r of $ROUNDS"
        for op in "${OPS[@]}"; do
            for s in "${SIZES[@]}"; do
                if ((r % 2)); then
                    engine_lat "$r" "$op" "$s"
                    perftest_lat "$r" "$op" "$s"
                else
                    perftest_lat "$r" "$op" "$s"
                    engine_lat "$r" "$op" "$s"
                fi
            done
        done
    done
    banner "medians of $ROUNDS rounds (usec): rpcrdma, perftest, their ratio, median of the per-round ratios"
    # Median of the numbers on standard input.
    median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
    for op in "${OPS[@]}"; do
        for s in "${SIZES[@]}"; do
            med() { awk -F'\t' -v t="$1" -v o="$op" -v s="$s" '$1 == t && $2 == o && $3 == s { print $4 }' "$WORK/lat.tsv" | median; }
            a=$(med rpcrdma) b=$(med perftest)
            # The ratio of each round where both ran.
            per=$(awk -F'\t' -v o="$op" -v s="$s" '$2 == o && $3 == s { v[$1, $5] = $4; r[$5] = 1 }
                END { for (k in r) if ((("rpcrdma", k) in v) && (("perftest", k) in v) && v["perftest", k] > 0)
                    print v["rpcrdma", k] / v["perftest", k] }' "$WORK/lat.tsv" | median)
            awk -v o="$op" -v s="$s" -v a="${a:-0}" -v b="${b:-0}" -v p="${per:-}" \
                'BEGIN { printf "%-6s %6s B  %9.3f %9.3f  %s  %s\n", o, s, a, b, (a > 0 && b > 0 ? sprintf("%.2f", a / b) : "-"), (p != "" ? sprintf("%.2f", p) : "-") }'
        done
    done
    ;;
*)
    echo "usage: guest-vm-test.sh test|bench" >&2
    exit 2
    ;;
esac

rm -rf "$WORK"
echo
echo "vm-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
