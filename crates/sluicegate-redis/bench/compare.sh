#!/usr/bin/env bash
# Decisions per second on one local Redis: sluicegate-redis against rate-limiter-flexible
# (Node) and `limits` (Python), same Redis, same traffic (TASKS concurrent callers spread over
# KEYS keys, 100 per second per key), measured in the same run.
#
#   crates/sluicegate-redis/bench/compare.sh [SECONDS=10] [TASKS=64] [KEYS=1000]
#
# Needs redis-server, node/npm and python3; installs rate-limiter-flexible, ioredis, limits and
# redis into a cache directory (BENCH_CACHE, default ~/.cache/sluicegate-bench) on first use.
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
seconds=${1:-10}
tasks=${2:-64}
keys=${3:-1000}
cache=${BENCH_CACHE:-$HOME/.cache/sluicegate-bench}
mkdir -p "$cache"

if [ ! -d "$cache/node/node_modules/rate-limiter-flexible" ]; then
  npm install --silent --prefix "$cache/node" rate-limiter-flexible ioredis >/dev/null
fi
if [ ! -x "$cache/venv/bin/python" ]; then
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet 'limits[async-redis]' redis
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

cargo build --quiet --release -p sluicegate-redis --example redis_bench
bin="${CARGO_TARGET_DIR:-$here/../../../target}/release/examples/redis_bench"

echo "# $(date -u +%FT%TZ) $(nproc) cores, redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), ${seconds}s per run, $tasks callers, $keys keys"
results=$(mktemp)
run() { "$@" | tee -a "$results"; redis-cli -p "$port" flushall >/dev/null; }
run "$bin" "redis://127.0.0.1:$port" "$seconds" "$tasks" "$keys" gcra
run "$bin" "redis://127.0.0.1:$port" "$seconds" "$tasks" "$keys" sliding-window
run "$bin" "redis://127.0.0.1:$port" "$seconds" "$tasks" "$keys" fixed-window
NODE_PATH="$cache/node/node_modules" run node "$here/rlflex.js" "$port" "$seconds" "$tasks" "$keys"
run "$cache/venv/bin/python" "$here/limits_bench.py" "$port" "$seconds" "$tasks" "$keys" sliding-window-counter
run "$cache/venv/bin/python" "$here/limits_bench.py" "$port" "$seconds" "$tasks" "$keys" fixed-window

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
base = next(r for r in rows if r["impl"] == "sluicegate-redis" and r["algorithm"] == "gcra")
print("# ratios: sluicegate-redis gcra decisions/s divided by each")
for r in rows:
    print(f'{r["impl"]:>22} {r["algorithm"]:>22} {r["per_second"]:>9}/s  x{base["per_second"] / max(r["per_second"], 1):.2f}')
PY
