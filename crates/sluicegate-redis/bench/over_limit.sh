#!/usr/bin/env bash
# The over-limit cache on a hot key over its limit: decisions per second of examples/redis_bench
# with 64 requests in flight on one key (100 per second allowed, so nearly every call is
# denied), without the cache and with it (BENCH_OVER_LIMIT_CACHE=1000), for gcra and
# fixed-window, ROUNDS times interleaved; prints min–max per case, the Redis script calls per
# second Redis ran, and the calls the cache answered. Then permit leasing on a hot key under
# its limit (1,000,000 per second allowed, so every call is granted): the plain path against
# leases of up to 64 and up to 1024 permits (BENCH_LEASE), for the same algorithms, the same
# way; prints decisions per second, script calls per second, and the calls granted from
# leases.
#
#   crates/sluicegate-redis/bench/over_limit.sh [SECONDS=5] [ROUNDS=3]
#
# Needs redis-server and cargo. Builds the example with cargo's `bench` profile (release
# optimisation without the workspace's fat LTO, so it builds in minutes on a small shared
# machine). Starts its own redis-server (no persistence) on a free loopback port.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-5}
rounds=${2:-3}

cargo build --quiet --profile bench -p sluicegate-redis --example redis_bench
bin="${CARGO_TARGET_DIR:-$(pwd)/../../../target}/release/examples/redis_bench"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
cli() { redis-cli -p "$port" "$@"; }
# Script calls Redis ran (FCALL and EVALSHA) since the last resetstat.
script_calls() {
  cli info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(fcall|evalsha):/ {n += $3} END {print n + 0}'
}

echo "# $(date -u +%FT%TZ), $(nproc) cores, redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')," \
  "${seconds}s per run, 64 in flight, one key, $rounds rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Runs the example ROUNDS times for each algorithm and each word of $1 (environment variables
# for one case, `VAR=value` joined by commas), appending each JSON line and its script calls
# to $2.
runs() {
  local values=$1 out=$2 round algorithm value
  for round in $(seq "$rounds"); do
    for algorithm in gcra fixed-window; do
      for value in $values; do
        cli flushall >/dev/null
        cli config resetstat >/dev/null
        line=$(env ${value//,/ } "$bin" "redis://127.0.0.1:$port" "$seconds" 64 1 "$algorithm")
        echo "$line $(script_calls)" | tee -a "$out" >&2
      done
    done
  done
}

# A markdown table of the runs in $1, grouped by algorithm and the JSON field $2; $3 names that
# column, $4 the share column, counted by the JSON field $5.
table() {
  python3 - "$@" <<'PY'
import json, sys
path, field, heading, share_heading, counted = sys.argv[1:]
groups = {}
for line in open(path):
    text, calls = line.rsplit(" ", 1)
    row = json.loads(text)
    row["redis_calls_per_second"] = int(calls) / row["seconds"]
    groups.setdefault((row["algorithm"], row[field]), []).append(row)
print(f"| algorithm | {heading} | decisions/s (min–max) | Redis script calls/s (min–max) | {share_heading} |")
print("|---|---|---:|---:|---:|")
span = lambda values: f"{min(values):,.0f}–{max(values):,.0f}"
for (algorithm, value), rows in groups.items():
    share = sum(r[counted] for r in rows) / max(sum(r["decisions"] for r in rows), 1)
    print(f"| {algorithm} | {value if value else 'off'} | {span([r['per_second'] for r in rows])} "
          f"| {span([r['redis_calls_per_second'] for r in rows])} | {share:.1%} |")
PY
}

runs "BENCH_OVER_LIMIT_CACHE=0 BENCH_OVER_LIMIT_CACHE=1000" "$dir/results"
table "$dir/results" over_limit_cache "over-limit cache (entries)" "answered by the cache" cache_hits
echo
# A hot key under its limit: every call granted.
runs "BENCH_RATE=1000000,BENCH_LEASE=0 BENCH_RATE=1000000,BENCH_LEASE=64 BENCH_RATE=1000000,BENCH_LEASE=1024" "$dir/leases"
table "$dir/leases" lease "leasing (most permits per lease; hot key under its limit)" "granted from leases" local_grants
