#!/usr/bin/env bash
# Adaptive concurrency limit at the HTTP edge, real processes on loopback (issue 13): wrk
# overloads a server of bounded capacity (crates/sluicegate-http/examples/bounded_upstream.rs:
# a fixed pool of workers, each request holding one for its service time, the rest waiting in
# arrival order) directly, through a proxy without a limit, and through the same proxy with an
# adaptive limit (503 + Retry-After when full).
#
# Goodput is the answers a client gets within its timeout: wrk's --timeout is the client's, a
# response later than it is counted as a timeout and kept out of the latency histogram, so
#   goodput = responses - non-2xx - late
# (exact as long as no 503 arrives late, which holds: a refusal comes at once or after the
# queue timeout, far below the client's). p99 is wrk's, over the answers within the timeout
# (503s included); "late/s" says how many came after it.
#
# Load is closed-loop: --connections clients, each sending its next request when the last is
# answered. The upstream answers at most workers / service time requests a second, so within a
# client timeout T it can hold workers * T / service requests; the default connections are 3x
# that.
#
# The proxy is `sluicegate proxy` with a route's `adaptive:` setting (--proxy sluicegate, the
# default), or the small axum proxy of crates/sluicegate-http/examples/adaptive_proxy.rs on the
# same layer (--proxy example).
#
# Usage: scripts/bench-adaptive-proxy.sh [--workers N] [--service-ms MS] [--timeout-s S]
#          [--connections N] [--duration S] [--warmup S] [--repeats N] [--threads N]
#          [--controllers "gradient2 vegas"] [--queue-timeout-ms MS] [--proxy sluicegate|example]
#          [--bin-dir DIR]
# --bin-dir uses already built sluicegate (in DIR), bounded_upstream and adaptive_proxy (in
# DIR/examples) instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."

workers=4
service_ms=20
timeout_s=1
connections=""
duration=15
warmup=5
repeats=3
threads=2
controllers="gradient2 vegas aimd"
queue_timeout_ms=250
bin_dir=""
proxy=sluicegate
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --service-ms) service_ms="$2"; shift 2 ;;
    --timeout-s) timeout_s="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --controllers) controllers="$2"; shift 2 ;;
    --queue-timeout-ms) queue_timeout_ms="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --proxy) proxy="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
capacity=$((workers * 1000 / service_ms))
in_time=$((capacity * timeout_s))
[ -n "$connections" ] || connections=$((3 * in_time))

command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }
case "$proxy" in sluicegate|example) ;; *) echo "--proxy: sluicegate or example" >&2; exit 2 ;; esac
if [ -z "$bin_dir" ]; then
  echo "== building (release)"
  cargo build --release -q -p sluicegate-http --example bounded_upstream --example adaptive_proxy
  [ "$proxy" = example ] || cargo build --release -q -p sluicegate-server --bin sluicegate
  bin_dir="${CARGO_TARGET_DIR:-target}/release"
fi
upstream_bin="$bin_dir/examples/bounded_upstream"
proxy_bin="$bin_dir/examples/adaptive_proxy"
sluicegate_bin="$bin_dir/sluicegate"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# wrk's summary as one line: responses non2xx late p50_us p99_us duration_us
cat > "$work/count.lua" <<'LUA'
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %d %d %d\n", summary.requests,
    summary.errors.status, summary.errors.timeout, latency:percentile(50),
    latency:percentile(99), summary.duration))
end
LUA

# Starts a process that prints "listening on ADDR" first; sets $address and records its pid.
start() {
  local log="$1"; shift
  "$@" > "$log.out" 2> "$log.err" &
  pids+=("$!")
  local tries=0
  address=""
  # Until the whole line is there: "listening on HOST:PORT".
  until [[ "$address" =~ ^[0-9.]+:[0-9]+$ ]]; do
    tries=$((tries + 1))
    [ "$tries" -lt 200 ] || { echo "no address from $*" >&2; cat "$log.err" >&2; exit 1; }
    sleep 0.05
    address="$(sed -n 's/^listening on //p' "$log.out" 2>/dev/null | head -1)"
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts `sluicegate proxy` in front of $1 with the rule file for controller $2; sets $address.
start_sluicegate() {
  local upstream="$1" controller="$2" rules="$work/rules-$2.yaml"
  {
    echo "routes:"
    echo "  - prefix: /"
    if [ "$controller" != none ]; then
      echo "    adaptive:"
      echo "      controller: $controller"
      [ "$controller" != aimd ] || echo "      timeout: 500ms"
      if [ "$queue_timeout_ms" != 0 ]; then
        echo "      queue_timeout: ${queue_timeout_ms}ms"
        echo "      queue_capacity: $connections"
      fi
    fi
  } > "$rules"
  local port admin
  port="$(free_port)"
  admin="$(free_port)"
  admin_address="127.0.0.1:$admin"
  "$sluicegate_bin" proxy --upstream "http://$1" --config "$rules" --listen "127.0.0.1:$port" \
    --admin "$admin_address" > "$work/proxy.out" 2> "$work/proxy.log" &
  pids+=("$!")
  local tries=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    tries=$((tries + 1))
    [ "$tries" -lt 200 ] || { echo "sluicegate proxy did not start" >&2; cat "$work/proxy.log" >&2; exit 1; }
    sleep 0.05
  done
  address="127.0.0.1:$port"
}

stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}

# One measured case: "direct", "proxy-none" or "proxy-CONTROLLER".
run_case() {
  local case="$1" run="$2"
  start "$work/upstream" "$upstream_bin" --workers "$workers" --service-ms "$service_ms"
  local target="$address"
  case "$case" in
    direct) ;;
    proxy-*) if [ "$proxy" = sluicegate ]; then
      start_sluicegate "$target" "${case#proxy-}"
      target="$address"
    else
      local args=(--upstream "$target" --controller "${case#proxy-}" --threads "$threads")
      [ "$queue_timeout_ms" = 0 ] || args+=(--queue-timeout-ms "$queue_timeout_ms" --queue-capacity "$connections")
      start "$work/proxy" "$proxy_bin" "${args[@]}"
      target="$address"
    fi ;;
  esac
  local wrk_args=(-t "$threads" -c "$connections" --timeout "${timeout_s}s" "http://$target/")
  [ "$warmup" = 0 ] || wrk "${wrk_args[@]}" -d "${warmup}s" > /dev/null
  # The limit half way through the measured load (at the end, the connections wrk drops count
  # as abandoned requests and pull it down).
  rm -f "$work/limit"
  local sampler=""
  if [ "$case" != direct ] && [ "${case#proxy-}" != none ]; then
    (
      sleep $((duration / 2))
      if [ "$proxy" = sluicegate ]; then
        curl -s "http://$admin_address/metrics" |
          sed -n 's/^sluicegate_proxy_adaptive_limit{[^}]*} //p' > "$work/limit"
      else
        grep '^limit' "$work/proxy.err" | tail -1 | awk '{print $2}' > "$work/limit"
      fi
    ) &
    sampler="$!"
  fi
  wrk "${wrk_args[@]}" -d "${duration}s" -s "$work/count.lua" > "$work/wrk.out"
  [ -z "$sampler" ] || wait "$sampler"
  local limit=""
  [ ! -f "$work/limit" ] || limit="$(cat "$work/limit")"
  stop_all
  rm -f "$work/proxy.err" "$work/proxy.out"
  read -r _ responses non2xx late p50 p99 micros < <(grep '^RESULT' "$work/wrk.out")
  awk -v c="$case" -v r="$run" -v n="$responses" -v s="$non2xx" -v l="$late" -v p50="$p50" \
      -v p99="$p99" -v us="$micros" -v lim="${limit:--}" 'BEGIN {
    secs = us / 1e6; good = n - s - l
    printf "%-16s %3d %10.1f %10.1f %10.1f %9.1f %9.1f %6s\n", c, r, good / secs, s / secs,
      l / secs, p50 / 1000, p99 / 1000, lim }'
}

echo "== upstream: $workers workers x ${service_ms} ms = $capacity answers/s at most;"
echo "   $connections wrk connections, client timeout ${timeout_s} s (3x the $in_time the upstream can answer in time);"
echo "   proxy: $proxy ($threads runtime threads for the example), queue timeout ${queue_timeout_ms} ms; ${warmup} s warm-up, ${duration} s measured"
echo "   (* the adaptive limit half way through the measured load)"
printf "%-16s %3s %10s %10s %10s %9s %9s %6s\n" case run "goodput/s" "503/s" "late/s" "p50 ms" "p99 ms" "limit*"
cases="direct proxy-none"
for c in $controllers; do cases="$cases proxy-$c"; done
for run in $(seq "$repeats"); do
  for c in $cases; do
    run_case "$c" "$run"
  done
done
