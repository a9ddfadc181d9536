#!/usr/bin/env bash
# User-space instructions per gRPC decision of `sluicegate serve` in memory, on each of its gRPC
# servers (the lean one, the default, and `--grpc-server tonic`), beside the benchmark's no-op
# tonic ceiling (examples/noop_rls.rs). Each runs under callgrind and is sent the same exact
# number of ShouldRateLimit calls (one hot key) by h2load. Counted instructions do not depend on
# the machine's load, so this separates a change's effect from the noise that decisions per
# second carry on a shared machine (scripts/bench-service.sh).
#
#   scripts/count-service-instructions.sh [calls, default 20000] [--bin-dir DIR]
#
# --bin-dir uses already built sluicegate and noop_rls from DIR instead of building them in
# release. Needs valgrind and h2load (apt-get install valgrind nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
calls=20000
bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    *) calls="$1"; shift ;;
  esac
done
for tool in valgrind callgrind_control h2load; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (apt-get install valgrind nghttp2-client)"; exit 1; }
done
if [ -z "$bin_dir" ]; then
  cargo build --release -q -p sluicegate-server --bin sluicegate --example noop_rls
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
  noop="${CARGO_TARGET_DIR:-target}/release/examples/noop_rls"
else
  sluicegate="$bin_dir/sluicegate"
  noop="$bin_dir/noop_rls"
fi
source scripts/lib/processes.sh
source scripts/lib/grpc-body.sh

write_bench_rules "$work/rules.yaml"
write_grpc_body "$work/body.grpc" bench key k0

# load PORT N: N calls over 4 connections of 16 streams; fails unless every one succeeded.
load() {
  local out
  out=$(h2load -c 4 -m 16 -n "$2" -d "$work/body.grpc" -H 'content-type: application/grpc' \
    -H 'te: trailers' \
    "http://127.0.0.1:$1/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
  grep -q "$2 succeeded" <<<"$out" || { echo "not every call succeeded:"; echo "$out"; exit 1; }
}

# count NAME PORT COMMAND...: instructions per call of COMMAND (a server on PORT), counted from
# after a warm-up of 2000 calls to after `calls` more.
count() {
  local name="$1" port="$2"; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.%p" "$@" \
    >"$work/$name.log" 2>"$work/$name.valgrind.log" &
  local pid=$!
  # This runs in a command substitution, whose exit the script's cleanup does not see.
  trap "kill $pid 2>/dev/null || true" EXIT
  wait_port "$port" 60
  load "$port" 2000 >&2
  callgrind_control -z "$pid" >/dev/null 2>&1
  load "$port" "$calls" >&2
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local total
  # Part 1: the dump after the measured calls (the zeroing dumps nothing).
  total=$(awk '/^summary:/ {print $2}' "$work/$name.$pid.1")
  awk -v t="$total" -v n="$calls" 'BEGIN{printf "%d", t/n}'
}

serve() { # NAME GRPC-SERVER: `serve` in memory on that gRPC server, counted
  local port; port=$(free_port)
  SLUICEGATE_LOG=warn count "$1" "$port" "$sluicegate" serve --config "$work/rules.yaml" \
    --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$(free_port)" --no-admin \
    --grpc-server "$2"
}

lean_per=$(serve lean lean)
tonic_per=$(serve tonic tonic)
p_noop=$(free_port)
noop_per=$(count noop "$p_noop" "$noop" --grpc-addr "127.0.0.1:$p_noop")

echo "user-space instructions per call (callgrind, $calls calls, h2load -c 4 -m 16, one hot key):"
echo "| server | instructions per call |"
echo "|---|---|"
echo "| serve, lean gRPC server (default) | $lean_per |"
echo "| serve --grpc-server tonic | $tonic_per |"
echo "| no-op ShouldRateLimit on tonic (the ceiling of bench-service.sh) | $noop_per |"
awk -v a="$lean_per" -v b="$tonic_per" 'BEGIN{printf "ratio lean / tonic: %.2f\n", a/b}'
awk -v a="$lean_per" -v b="$noop_per" 'BEGIN{printf "ratio lean / no-op tonic: %.2f\n", a/b}'
