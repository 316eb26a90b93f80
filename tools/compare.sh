#!/usr/bin/env bash
# Same-run comparison of a null RPC's round trip with independent transports on this machine:
# the cache-line ping-pong and the zero-work message ring `rpcrdma bench rpc` measures itself,
# UCX's shared-memory tag ping-pong (ucx_perftest, UCX_TLS=posix,self) and a TCP ping-pong
# over loopback (sockperf), each pinned to the same two cores, interleaved round by round so
# that every transport sees the same phases of a shared host. Prints one line per round and
# the medians.
#
# Usage: tools/compare.sh [ROUNDS]   (default 5; `make compare`)
# Needs: target/release/rpcrdma (make build), ucx-utils and sockperf (installed with apt-get
# when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-5}
RPCRDMA=target/release/rpcrdma
[ -x "$RPCRDMA" ] || { echo "compare: build first (make build)" >&2; exit 1; }
tools/deps.sh ucx-utils sockperf
if [ "$(nproc)" -lt 2 ]; then
  echo "compare: needs two cores" >&2
  exit 1
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# Median of the numbers on standard input.
median() {
  sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "nan"; exit}
    if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}

# One JSON field (a number) of a flat or nested JSON line.
field() {
  grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2
}

# UCX tag ping-pong of 8-byte messages over posix shared memory; prints the round trip's
# p50 in ns (ucx_perftest reports half round trips in microseconds).
ucx_rtt() {
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS=posix,self timeout 30 ucx_perftest -p "$port" -c 1 >/dev/null 2>&1 &
  local srv=$!
  pids+=("$srv")
  sleep 0.3
  local half
  half=$(UCX_TLS=posix,self timeout 30 ucx_perftest 127.0.0.1 -p "$port" -t tag_lat -c 0 \
    -n 300000 -s 8 2>/dev/null | awk '/^Final:/ {print $3}')
  wait "$srv" 2>/dev/null || true
  awk -v h="${half:-nan}" 'BEGIN {if (h == "nan") print "nan"; else printf "%.0f\n", h * 2000}'
}

# TCP ping-pong of 64-byte messages over loopback; prints the round trip's p50 in ns.
tcp_rtt() {
  local port=$((20000 + RANDOM % 20000))
  taskset -c 1 timeout 30 sockperf server --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  local srv=$!
  pids+=("$srv")
  sleep 0.3
  local half
  half=$(taskset -c 0 timeout 20 sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 2 -m 64 \
    2>&1 | awk '/percentile 50.000/ {print $NF}')
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  awk -v h="${half:-nan}" 'BEGIN {if (h == "nan") print "nan"; else printf "%.0f\n", h * 2000}'
}

tmp=$(mktemp -d)
trap 'cleanup; rm -rf "$tmp"' EXIT
touch "$tmp/vs_ring"
printf '%-6s %10s %10s %12s %12s %12s %10s %10s %10s\n' round limit_ns ring_ns rpc_p50_ns ucx_rtt_ns \
  tcp_rtt_ns rpc/limit rpc/ring rpc/ucx
for r in $(seq 1 "$ROUNDS"); do
  json=$("$RPCRDMA" bench rpc --workload null --depth 1 --seconds 0.5 --json)
  limit=$(field limit_ns_p50 <<<"$json")
  ring=$(field ns_per_round_trip <<<"$json")
  # The ring measured before and after the run in different phases: no ratio to it.
  changed=$(grep -c '"phase_changed":true' <<<"$json" || true)
  rpc=$(field p50 <<<"$json")
  ucx=$(ucx_rtt)
  tcp=$(tcp_rtt)
  echo "$limit" >>"$tmp/limit"
  echo "$ring" >>"$tmp/ring"
  echo "$rpc" >>"$tmp/rpc"
  echo "$ucx" >>"$tmp/ucx"
  echo "$tcp" >>"$tmp/tcp"
  awk -v l="$limit" -v g="$ring" -v c="$changed" -v p="$rpc" -v u="$ucx" -v t="$tcp" -v r="$r" 'BEGIN {
    ring = (c > 0 ? "-" : sprintf("%.2f", (g > 0 ? p / g : 0)))
    printf "%-6s %10s %10.0f %12s %12s %12s %10.2f %10s %10.2f\n", r, l, g, p, u, t, p / l, ring,
      (u > 0 ? p / u : 0) }'
  awk -v l="$limit" -v p="$rpc" 'BEGIN {print p / l}' >>"$tmp/ratio"
  awk -v g="$ring" -v c="$changed" -v p="$rpc" 'BEGIN {if (g > 0 && c == 0) print p / g}' >>"$tmp/vs_ring"
  awk -v u="$ucx" -v p="$rpc" 'BEGIN {if (u > 0) print p / u}' >>"$tmp/vs_ucx"
done
vs_ring=$(median <"$tmp/vs_ring")
if [ "$vs_ring" = nan ]; then vs_ring=-; else vs_ring=$(printf '%.2f' "$vs_ring"); fi
printf '%-6s %10s %10.0f %12s %12s %12s %10.2f %10s %10.2f\n' median "$(median <"$tmp/limit")" \
  "$(median <"$tmp/ring")" "$(median <"$tmp/rpc")" "$(median <"$tmp/ucx")" "$(median <"$tmp/tcp")" \
  "$(median <"$tmp/ratio")" "$vs_ring" "$(median <"$tmp/vs_ucx")"
echo "(round trips, p50 per run; ring = the zero-work message ring's mean round trip on the same cores,"
echo " rpc/ring '-' where the ring measured the host in another phase before and after the run;"
echo " rpc = rpcrdma null RPC at depth 1 on the soft fabric;"
echo " ucx = UCX tag ping-pong, 8 B, posix shared memory; tcp = sockperf TCP ping-pong, 64 B, loopback)"
