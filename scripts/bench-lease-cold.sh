#!/usr/bin/env bash
# Leasing on cold keys against the plain Redis path, in rounds (issue 31, "no worse than the
# plain path on 100k cold keys"): two `sluicegate serve --redis` on one local redis-server, one
# with `--redis-lease 1024`, loaded in turn by rls_load on KEYS keys (default 100000), the two
# sides one right after the other in each round so that a slow spell of the shared machine
# falls on both. Prints per round each side's decisions/s, p99 and server CPU per decision, and
# the ratio of the totals.
#
#   scripts/bench-lease-cold.sh [rounds, default 5] [seconds per side, default 4]
#
# Environment: SLUICEGATE_BIN and RLS_LOAD_BIN use binaries already built (by default
# `cargo build --release` builds both); KEYS the key space.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
seconds="${2:-4}"
source scripts/lib/processes.sh
source scripts/lib/grpc-body.sh

if [ -z "${SLUICEGATE_BIN:-}" ] || [ -z "${RLS_LOAD_BIN:-}" ]; then
  cargo build --release -q -p sluicegate-server --bin sluicegate --example rls_load
fi
sluicegate="${SLUICEGATE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluicegate}"
load="${RLS_LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/examples/rls_load}"

write_bench_rules "$work/rules.yaml"
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_port "$redis_port"

declare -A port pid
for side in plain lease; do
  port[$side]=$(free_port)
  extra=()
  [ "$side" = lease ] && extra=(--redis-lease 1024)
  SLUICEGATE_LOG=warn "$sluicegate" serve --config "$work/rules.yaml" \
    --grpc-addr "127.0.0.1:${port[$side]}" --http-addr "127.0.0.1:$(free_port)" --no-admin \
    --redis "redis://127.0.0.1:$redis_port" "${extra[@]}" >"$work/$side.log" 2>&1 &
  pids+=($!)
  pid[$side]=$!
  wait_port "${port[$side]}"
done

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
declare -A total
total[plain]=0
total[lease]=0
echo "round side decisions/s p99_us server_cpu_us_per_decision"
for round in $(seq 1 "$rounds"); do
  for side in plain lease; do
    before=$(ticks "${pid[$side]}")
    line=$("$load" --target "http://127.0.0.1:${port[$side]}" --domain bench --key key \
      --keys "${KEYS:-100000}" --concurrency 64 --connections 4 --duration "$seconds" --warmup 1)
    after=$(ticks "${pid[$side]}")
    grep -q ' errors=0 ' <<<"$line" || echo "!! calls to $side failed: $line" >&2
    dps=$(sed -n 's/.*decisions_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
    p99=$(sed -n 's/.*p99_us=\([0-9.]*\).*/\1/p' <<<"$line")
    answered=$(sed -n 's/.*answered=\([0-9]*\).*/\1/p' <<<"$line")
    cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$answered" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    echo "$round $side $dps $p99 $cpu"
    total[$side]=$(awk -v a="${total[$side]}" -v b="$dps" 'BEGIN { print a + b }')
  done
done
awk -v l="${total[lease]}" -v p="${total[plain]}" 'BEGIN { printf "lease / plain, decisions/s over every round: %.3f\n", l / p }'
