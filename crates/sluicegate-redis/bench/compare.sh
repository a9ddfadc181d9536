#!/usr/bin/env bash
# Decisions per second with 64 requests in flight on one local Redis, for one hot key and for
# 100k keys: sluicegate-redis (gcra, fixed-window) against rate-limiter-flexible (Node,
# RateLimiterRedis over ioredis) and Python `limits` (fixed window, moving window), plus the
# ceiling `redis-benchmark` reaches for EVALSHA of a trivial script at the same concurrency.
# Every contender runs against the same Redis in the same run, ROUNDS times interleaved (odd
# rounds in one order, even rounds in the reverse order: use an even ROUNDS); the table shows
# medians.
#
#   crates/sluicegate-redis/bench/compare.sh [SECONDS=10] [ROUNDS=2] [INFLIGHT=64]
#
# Needs redis-server, redis-benchmark, node/npm, python3 and cargo. Installs
# rate-limiter-flexible and ioredis (npm), limits and redis (pip, in a venv) into BENCH_CACHE
# (default ~/.cache/sluicegate-bench) on first use. Starts its own redis-server (no
# persistence) on a free loopback port and stops it on exit.
#
# Each client keeps INFLIGHT calls in flight: sluicegate-redis as INFLIGHT tokio tasks sharing
# one multiplexed connection, on tokio's multi-threaded runtime (one worker per core) and again
# on its current-thread runtime ("1 thread", as Node runs), rate-limiter-flexible as INFLIGHT async workers on one ioredis connection, `limits`
# as INFLIGHT asyncio tasks on redis-py's connection pool. Every key gets 100 per second.
#
# Each row gives the CPU time per decision of Redis and of the client (user and system, every
# thread): on a small machine both share the cores, so either can be what a change moves.
#
# BENCH_PIN=1 runs redis-server on CPU 0 and every client (and redis-benchmark) on CPU 1, so
# that on a small machine the server and the client under test do not take turns on one core.
#
# Leasing: sluicegate-redis again with permit leasing on (up to 1024 permits a lease), as
# "sluicegate-redis (leasing 1024)".
#
# BENCH_BASELINE=path/to/redis_bench (an examples/redis_bench binary built from another
# commit) adds that build's gcra and fixed-window runs, labelled "sluicegate-redis (baseline)".
#
# Ceilings: `redis-benchmark -c INFLIGHT -P 1` (INFLIGHT connections, one call each) is the
# literal "same concurrency"; the multiplexed clients above instead send their calls down one
# connection, which Redis reads in batches, so `-c 1 -P INFLIGHT` (one connection, INFLIGHT
# pipelined) is the ceiling of that shape. Both are reported; neither pays for a client.
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
seconds=${1:-10}
rounds=${2:-2}
inflight=${3:-64}
many_keys=100000
cache=${BENCH_CACHE:-$HOME/.cache/sluicegate-bench}
mkdir -p "$cache"

if [ ! -d "$cache/node/node_modules/rate-limiter-flexible" ] || [ ! -d "$cache/node/node_modules/ioredis" ]; then
  npm install --silent --prefix "$cache/node" rate-limiter-flexible ioredis >/dev/null
fi
if [ ! -x "$cache/venv/bin/python" ] || ! "$cache/venv/bin/python" -c 'import limits, redis' 2>/dev/null; then
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet 'limits[async-redis]' redis
fi

cargo build --quiet --release -p sluicegate-redis --example redis_bench
bin="${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/redis_bench"

server_cpu=() client_cpu=()
if [ "${BENCH_PIN:-0}" = 1 ]; then
  server_cpu=(taskset -c 0)
  client_cpu=(taskset -c 1)
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
results="$dir/results"
${server_cpu[@]+"${server_cpu[@]}"} redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --pidfile "$dir/redis.pid" >"$dir/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
cli() { redis-cli -p "$port" "$@"; }
# Redis's CPU time so far, in clock ticks (user + system).
redis_ticks() { awk '{print $14 + $15}' "/proc/$redis_pid/stat"; }

# timed COMMAND...: runs it, passes its output on, and writes the CPU seconds it used (user
# and system, every thread) to $dir/client_cpu.
timed() {
  python3 -c '
import resource, subprocess, sys
out = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE, check=True).stdout
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(str(usage.ru_utime + usage.ru_stime))
sys.stdout.buffer.write(out)' "$dir/client_cpu" "$@"
}

# run KEYS COMMAND...: one contender's run; appends its JSON line with keys, the round and the
# CPU that Redis and the client used.
run() {
  local keys=$1 before after line
  shift
  cli flushall >/dev/null
  cli script flush >/dev/null
  cli config resetstat >/dev/null
  before=$(redis_ticks)
  line=$(timed ${client_cpu[@]+"${client_cpu[@]}"} "$@")
  after=$(redis_ticks)
  python3 - "$line" "$keys" "$round" "$((after - before))" "$(getconf CLK_TCK)" "$(cat "$dir/client_cpu")" \
    >>"$results" <<'PY'
import json, sys
row = json.loads(sys.argv[1])
row.update(keys=int(sys.argv[2]), round=int(sys.argv[3]))
decisions = max(row["decisions"], 1)
row["redis_us_per_decision"] = int(sys.argv[4]) / int(sys.argv[5]) * 1e6 / decisions
row["client_us_per_decision"] = float(sys.argv[6]) * 1e6 / decisions
print(json.dumps(row))
PY
  tail -1 "$results" >&2
}

# ceiling "-c C -P P": redis-benchmark's EVALSHA of `return 1` (no keys), as a JSON line.
ceiling() {
  local sha rps
  sha=$(cli script load "return 1")
  cli config resetstat >/dev/null
  rps=$(${client_cpu[@]+"${client_cpu[@]}"} redis-benchmark -p "$port" "$@" -n "$((seconds * 40000))" --csv EVALSHA "$sha" 0 |
    tail -1 | cut -d, -f2 | tr -d '"')
  printf '{"impl":"redis-benchmark","algorithm":"EVALSHA return 1 (%s)","decisions":1,"per_second":%s,"keys":0,"round":%s,"redis_us_per_decision":null}\n' \
    "$*" "$rps" "$round" | tee -a "$results" >&2
}

echo "# $(date -u +%FT%TZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))," \
  "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), ${seconds}s per run, $inflight in flight, $rounds rounds," \
  "pinned: ${BENCH_PIN:-0}, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
export NODE_PATH="$cache/node/node_modules"
url="redis://127.0.0.1:$port"
# contender NAME KEYS: one contender's run on KEYS keys.
contender() {
  local keys=$2
  case $1 in
    gcra | fixed-window) run "$keys" "$bin" "$url" "$seconds" "$inflight" "$keys" "$1" ;;
    one-thread-*)
      BENCH_THREADS=1 BENCH_LABEL="sluicegate-redis (1 thread)" \
        run "$keys" "$bin" "$url" "$seconds" "$inflight" "$keys" "${1#one-thread-}" ;;
    # Permit leasing (up to 1024 permits a lease): a hot key over its limit mostly leases
    # nothing (over_limit.sh measures one under it), and a cold key never does.
    leasing-*)
      BENCH_LEASE=1024 BENCH_LABEL="sluicegate-redis (leasing 1024)" \
        run "$keys" "$bin" "$url" "$seconds" "$inflight" "$keys" "${1#leasing-}" ;;
    baseline-*)
      BENCH_LABEL="sluicegate-redis (baseline)" \
        run "$keys" "$BENCH_BASELINE" "$url" "$seconds" "$inflight" "$keys" "${1#baseline-}" ;;
    rlflex) run "$keys" node "$here/rlflex.js" "$port" "$seconds" "$inflight" "$keys" ;;
    limits-*)
      run "$keys" "$cache/venv/bin/python" "$here/limits_bench.py" "$port" "$seconds" "$inflight" \
        "$keys" "${1#limits-}" ;;
  esac
}
contenders=(gcra leasing-gcra fixed-window leasing-fixed-window one-thread-gcra
  one-thread-fixed-window rlflex limits-fixed-window limits-moving-window)
if [ -n "${BENCH_BASELINE:-}" ]; then
  contenders+=(baseline-gcra baseline-fixed-window)
fi
for round in $(seq "$rounds"); do
  ceiling -c "$inflight" -P 1
  ceiling -c 1 -P "$inflight"
  for keys in 1 "$many_keys"; do
    # Even rounds run the contenders in the reverse order: on a shared machine whose share of
    # CPU drifts during a run (the host's steal grows under sustained load), a fixed order
    # would favour whoever runs first; over a pair of rounds a steady drift cancels out.
    order=("${contenders[@]}")
    if ((round % 2 == 0)); then
      order=()
      for ((i = ${#contenders[@]} - 1; i >= 0; i--)); do order+=("${contenders[i]}"); done
    fi
    for name in "${order[@]}"; do contender "$name" "$keys"; done
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
groups = {}
for r in rows:
    groups.setdefault((r["impl"], r["algorithm"], r["keys"]), []).append(r)
med = {k: statistics.median(r["per_second"] for r in v) for k, v in groups.items()}
ceilings = {k[1]: v for k, v in med.items() if k[0] == "redis-benchmark"}
(c64_name, c64), (cp_name, cp) = sorted(ceilings.items(), key=lambda kv: "-P 1)" not in kv[0])
print("ceilings (median): " + "; ".join(f"{n}: {v:,.0f}/s" for n, v in ceilings.items()))
print()
print("| keys | implementation | algorithm | decisions/s (median) | runs | Redis CPU µs/decision | client CPU µs/decision | vs rate-limiter-flexible | of ceiling -c N -P 1 | of ceiling -c 1 -P N |")
print("|---:|---|---|---:|---|---:|---:|---:|---:|---:|")
for (impl, alg, keys), per_second in med.items():
    if impl == "redis-benchmark":
        continue
    base = med.get(("rate-limiter-flexible", "fixed-window", keys))
    runs = "/".join(f'{r["per_second"]:,.0f}' for r in groups[(impl, alg, keys)])
    cpu = statistics.median(r["redis_us_per_decision"] for r in groups[(impl, alg, keys)])
    client = statistics.median(r["client_us_per_decision"] for r in groups[(impl, alg, keys)])
    ratio = f"{per_second / base:.2f}x" if base else "-"
    print(f"| {keys:,} | {impl} | {alg} | {per_second:,.0f} | {runs} | {cpu:.1f} | {client:.1f} | {ratio} | {per_second / c64:.2f} | {per_second / cp:.2f} |")
PY
