#!/usr/bin/env bash
# Service load benchmark (BENCHMARKS.md, "Service"): decisions per second and p50/p99 latency of
# `sluicegate serve` over gRPC on loopback, against the ceilings measured in the same run: a no-op
# ShouldRateLimit server on the same stack (`ceiling`: tonic, envoy-types, the same runtime
# settings), and nghttpd (`nghttpd`: nghttp2's C HTTP/2 server, package nghttp2-server) answering
# a POST to the gRPC method's path with a small static file, on as many threads as the servers
# have cores: what HTTP/2 alone costs, with no gRPC at all.
#
# Cases: one hot key, and keys drawn uniformly from 100k values. Targets: the ceilings, `serve` in
# memory (`memory`: the default gRPC server, the lean one), `serve --grpc-server tonic` in memory
# (`tonic`: the tonic path, when the binary has the flag), and `serve --redis` on a local
# redis-server (when the binary has the flag).
# Load: `rls_load` (a separate process: a light gRPC client driving HTTP/2 with the h2 crate, every
# request body encoded once at start-up) for both cases, and h2load (nghttp2-client, fully
# independent of the Rust stack; one fixed body, so the hot key only) for the hot key. nghttpd is
# not a gRPC server, so only h2load measures it. Every generator runs at the same number of calls
# in flight. Each (generator, case, target) is run --repeats times, targets interleaved so they
# share the machine's noise, and the table shows medians.
#
# Besides throughput and latency it reports the server process's CPU time per decision (from
# /proc, over the measured run and its warm-up): on a machine shared with other work that figure
# moves far less than decisions per second do.
#
# Usage: scripts/bench-service.sh [--duration S] [--warmup S] [--concurrency N] [--connections N]
#                                 [--repeats N] [--keys N] [--pin] [--no-h2load] [--no-redis]
#                                 [--bin-dir DIR] [--no-limitador] [--no-nghttpd]
# --pin runs the servers on CPU 0 and the load generators on CPU 1 (taskset).
# --bin-dir uses already built sluicegate, noop_rls and rls_load from DIR instead of building.
# h2load and nghttpd are installed with apt-get when missing and the script runs as root (or
# with password-less sudo); otherwise their rows are left out with a note naming the package.
# limitador (Kuadrant's Envoy rate limit service) runs beside them as a peer: in memory, and on
# the same Redis with its `redis` and `redis_cached` storages. scripts/lib/limitador.sh builds it
# once from its source into the bench cache (LIMITADOR_SRC names the source; the first build
# is long, see that script); LIMITADOR_BIN=path uses a binary already built; --no-limitador
# leaves it out. BENCH_REDIS_LEASE=N adds `serve --redis --redis-lease N` (permit leasing) as
# the target `redis-lease`, on the same Redis.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=5
warmup=2
concurrency=64
connections=4
repeats=3
many_keys=100000
pin=0
use_h2load=1
use_redis=1
use_limitador=1
use_nghttpd=1
bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --keys) many_keys="$2"; shift 2 ;;
    --pin) pin=1; shift ;;
    --no-h2load) use_h2load=0; shift ;;
    --no-redis) use_redis=0; shift ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --no-limitador) use_limitador=0; shift ;;
    --no-nghttpd) use_nghttpd=0; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ $((concurrency % connections)) -ne 0 ]; then
  echo "--concurrency must be a multiple of --connections (h2load runs N streams per connection)" >&2
  exit 2
fi

if [ -z "$bin_dir" ]; then
  echo "== building (release)"
  cargo build --release -q -p sluicegate-server --bin sluicegate --example noop_rls --example rls_load
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
  noop="${CARGO_TARGET_DIR:-target}/release/examples/noop_rls"
  load="${CARGO_TARGET_DIR:-target}/release/examples/rls_load"
else
  sluicegate="$bin_dir/sluicegate"
  noop="$bin_dir/noop_rls"
  load="$bin_dir/rls_load"
fi

source scripts/lib/processes.sh

server_cpu=()
load_cpu=()
if [ "$pin" = 1 ]; then
  server_cpu=(taskset -c 0)
  load_cpu=(taskset -c 1)
fi

source scripts/lib/grpc-body.sh

write_bench_rules "$work/rules.yaml"

# nghttpd installs into /usr/sbin, which a user's PATH may lack.
PATH="$PATH:/usr/sbin"
# have_tool COMMAND PACKAGE: whether COMMAND can run, after installing the Debian PACKAGE that
# holds it if it is missing and this user may (root, or password-less sudo).
have_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo -n true 2>/dev/null || return 1
    sudo=(sudo)
  fi
  echo "== installing $2 (for $1)"
  "${sudo[@]}" apt-get update -qq >/dev/null || return 1
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$2" >/dev/null || return 1
  command -v "$1" >/dev/null 2>&1
}

if [ "$use_h2load" = 1 ] && ! have_tool h2load nghttp2-client; then
  echo "!! h2load rows NOT measured: h2load is not installed (apt-get install nghttp2-client)."
  use_h2load=0
fi
[ "$use_h2load" = 1 ] && write_grpc_body "$work/body.grpc" bench key k0
nghttpd_note=""
if [ "$use_nghttpd" = 0 ]; then
  nghttpd_note="nghttpd rows NOT measured: --no-nghttpd was given."
elif [ "$use_h2load" = 0 ]; then
  nghttpd_note="nghttpd rows NOT measured: only h2load measures it, and h2load is not run."
elif ! have_tool nghttpd nghttp2-server; then
  nghttpd_note="nghttpd rows NOT measured: nghttpd is not installed (apt-get install nghttp2-server)."
fi

declare -A grpc_port server_pid
grpc_port[ceiling]="$(free_port)"
"${server_cpu[@]}" "$noop" --grpc-addr "127.0.0.1:${grpc_port[ceiling]}" >"$work/ceiling.log" 2>&1 &
pids+=($!)
server_pid[ceiling]=$!
wait_port "${grpc_port[ceiling]}" 10 "the ceiling server"

# Several `serve`s run at once: none serves the admin page (its port would be the same).
no_admin=()
if "$sluicegate" serve --help | grep -q -- '--no-admin'; then no_admin=(--no-admin); fi

start_serve() {
  local name="$1"
  shift
  grpc_port[$name]="$(free_port)"
  SLUICEGATE_LOG=warn "${server_cpu[@]}" "$sluicegate" serve --config "$work/rules.yaml" \
    --grpc-addr "127.0.0.1:${grpc_port[$name]}" --http-addr "127.0.0.1:$(free_port)" \
    "${no_admin[@]}" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  server_pid[$name]=$!
  wait_port "${grpc_port[$name]}" 10 "sluicegate serve ($name)"
}

targets=(ceiling)
# nghttpd answers the method's path with a static file: the 7 bytes of a framed
# RateLimitResponse{overall_code: OK} and a grpc-status trailer, the frames of a gRPC answer
# (HEADERS, DATA, trailing HEADERS) with none of gRPC's work, on one thread per core the servers
# may use.
if [ -z "$nghttpd_note" ]; then
  method_path=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
  mkdir -p "$work/nghttpd/${method_path%/*}"
  printf '\0\0\0\0\2\10\1' >"$work/nghttpd/$method_path"
  grpc_port[nghttpd]="$(free_port)"
  "${server_cpu[@]}" nghttpd --no-tls --address=127.0.0.1 --workers="$("${server_cpu[@]}" nproc)" \
    --trailer='grpc-status: 0' --htdocs="$work/nghttpd" "${grpc_port[nghttpd]}" \
    >"$work/nghttpd.log" 2>&1 &
  pids+=($!)
  server_pid[nghttpd]=$!
  wait_port "${grpc_port[nghttpd]}" 10 "nghttpd"
  # It serves files to GET; measuring it means it answers h2load's POST too.
  if h2load -n 4 -c 1 -d "$work/body.grpc" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://127.0.0.1:${grpc_port[nghttpd]}/$method_path" 2>&1 |
    grep -q 'status codes: 4 2xx'; then
    targets+=(nghttpd)
  else
    nghttpd_note="nghttpd rows NOT measured: it did not answer h2load's POST with 200."
  fi
fi
[ -n "$nghttpd_note" ] && echo "!! $nghttpd_note"

targets+=(memory)
start_serve memory
if "$sluicegate" serve --help | grep -q -- '--grpc-server'; then
  start_serve tonic --grpc-server tonic
  targets+=(tonic)
fi

redis_note=""
if [ "$use_redis" = 0 ]; then
  redis_note="Redis rows NOT measured: --no-redis was given."
elif ! "$sluicegate" serve --help | grep -q -- '--redis'; then
  redis_note="Redis rows NOT measured: this sluicegate binary has no 'serve --redis' flag yet."
elif ! command -v redis-server >/dev/null 2>&1; then
  redis_note="Redis rows NOT measured: redis-server is not installed (apt-get install redis-server)."
else
  redis_port="$(free_port)"
  "${server_cpu[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
    --appendonly no >"$work/redis-server.log" 2>&1 &
  pids+=($!)
  wait_port "$redis_port" 10 "redis-server"
  start_serve redis --redis "redis://127.0.0.1:$redis_port"
  targets+=(redis)
  if [ -n "${BENCH_REDIS_LEASE:-}" ]; then
    start_serve redis-lease --redis "redis://127.0.0.1:$redis_port" \
      --redis-lease "$BENCH_REDIS_LEASE"
    targets+=(redis-lease)
  fi
fi
[ -n "$redis_note" ] && echo "!! $redis_note"

limitador_note=""
if [ "$use_limitador" = 1 ]; then
  limitador="${LIMITADOR_BIN:-}"
  if [ -z "$limitador" ]; then
    source scripts/lib/limitador.sh
    limitador="$(limitador_build)" || limitador=""
  fi
  if [ -z "$limitador" ] || [ ! -x "$limitador" ]; then
    limitador_note="limitador rows NOT measured: no limitador-server binary (see scripts/lib/limitador.sh)."
  fi
else
  limitador_note="limitador rows NOT measured: --no-limitador was given."
fi
start_limitador() {
  local name="$1"
  shift
  grpc_port[$name]="$(free_port)"
  RUST_LOG=error "${server_cpu[@]}" "$limitador" -b 127.0.0.1 -p "${grpc_port[$name]}" \
    -B 127.0.0.1 -P "$(free_port)" "$work/limitador/limits.yaml" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
  server_pid[$name]=$!
  wait_port "${grpc_port[$name]}" 10 "limitador ($name)"
}
if [ -z "$limitador_note" ]; then
  # The benchmark's rule as limitador writes it: per value of the descriptor's entry `key`,
  # in a one-second fixed window, a limit no load reaches (docs/limitador-peer.md). Its own
  # folder: limitador watches the file's directory.
  mkdir -p "$work/limitador"
  cat >"$work/limitador/limits.yaml" <<'YAML'
- namespace: bench
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables:
    - "descriptors[0]['key']"
YAML
  start_limitador limitador memory
  targets+=(limitador)
  if [[ " ${targets[*]} " == *" redis "* ]]; then
    start_limitador limitador-redis redis "redis://127.0.0.1:$redis_port"
    start_limitador limitador-redis-cached redis_cached "redis://127.0.0.1:$redis_port"
    targets+=(limitador-redis limitador-redis-cached)
  fi
fi
[ -n "$limitador_note" ] && echo "!! $limitador_note"

ticks_per_sec="$(getconf CLK_TCK)"
# User plus system CPU time of a process, in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

results="$work/results.tsv"
: >"$results"

run_rls_load() {
  local target="$1" keys="$2" line cpu_before cpu_after
  cpu_before="$(cpu_ticks "${server_pid[$target]}")"
  line="$("${load_cpu[@]}" "$load" --target "http://127.0.0.1:${grpc_port[$target]}" \
    --domain bench --key key --keys "$keys" --concurrency "$concurrency" \
    --connections "$connections" --duration "$duration" --warmup "$warmup")"
  cpu_after="$(cpu_ticks "${server_pid[$target]}")"
  echo "   $line"
  if ! grep -q ' errors=0 ' <<<"$line"; then
    echo "!! calls to $target failed: $line" >&2
  fi
  local dps p50 p99 answered cpu_us
  dps="$(sed -n 's/.*decisions_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")"
  p50="$(sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' <<<"$line")"
  p99="$(sed -n 's/.*p99_us=\([0-9.]*\).*/\1/p' <<<"$line")"
  answered="$(sed -n 's/.*answered=\([0-9]*\).*/\1/p' <<<"$line")"
  cpu_us="$(awk -v t=$((cpu_after - cpu_before)) -v hz="$ticks_per_sec" -v n="$answered" \
    'BEGIN { printf "%.1f", t / hz * 1e6 / n }')"
  printf 'rls_load\t%s\t%s\t%s\t%s\t%s\t%s\n' "$keys" "$target" "$dps" "$p50" "$p99" "$cpu_us" >>"$results"
}

# h2load sends one fixed body: domain "bench", entry (key, k0).

run_h2load() {
  local target="$1" out="$work/h2load.out" log="$work/h2load.log" cpu_before cpu_after
  rm -f "$log" # h2load appends to its log file
  cpu_before="$(cpu_ticks "${server_pid[$target]}")"
  "${load_cpu[@]}" h2load -t 1 -c "$connections" -m $((concurrency / connections)) \
    --warm-up-time="$warmup" -D "$duration" -d "$work/body.grpc" \
    -H 'content-type: application/grpc' -H 'te: trailers' --log-file="$log" \
    "http://127.0.0.1:${grpc_port[$target]}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
    >"$out" 2>&1
  cpu_after="$(cpu_ticks "${server_pid[$target]}")"
  python3 - "$log" "$out" "$target" "$duration" $((cpu_after - cpu_before)) "$ticks_per_sec" "$warmup" \
    >>"$results" <<'EOF'
import re, sys
log, out, target, duration = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
cpu_seconds = int(sys.argv[5]) / int(sys.argv[6])
text = open(out).read()
done = re.search(r"(\d+) succeeded, (\d+) failed, (\d+) errored", text)
if not done or int(done.group(2)) or int(done.group(3)):
    sys.exit("h2load failed against %s:\n%s" % (target, text))
latencies = sorted(int(l.split("\t")[2]) for l in open(log) if l.split("\t")[1] == "200")
q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))]
# "succeeded" and the log count only the measured requests; the CPU time also covers the warm-up,
# whose requests are estimated at the measured rate.
answered = int(done.group(1))
warmup = float(sys.argv[7])
print("h2load\t1\t%s\t%.0f\t%.1f\t%.1f\t%.1f" % (target, answered / duration, q(0.50), q(0.99),
    cpu_seconds * 1e6 / (answered * (duration + warmup) / duration)))
EOF
  echo "   $(tail -n 1 "$results" | cut -f3-)"
}

echo "== load: $concurrency calls in flight over $connections connections, ${warmup}s warm-up, ${duration}s measured, $repeats repeats"
for repeat in $(seq 1 "$repeats"); do
  for keys in 1 "$many_keys"; do
    for target in "${targets[@]}"; do
      # Not a gRPC server: h2load measures it, and only that.
      [ "$target" = nghttpd ] && continue
      echo "-- repeat $repeat, rls_load, $keys key(s), $target"
      run_rls_load "$target" "$keys"
    done
  done
  if [ "$use_h2load" = 1 ]; then
    for target in "${targets[@]}"; do
      echo "-- repeat $repeat, h2load, 1 key, $target"
      run_h2load "$target"
    done
  fi
done

echo
echo "== medians of $repeats runs (fraction and p99 ratio against the ceiling of the same generator and case)"
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    generator, keys, target, *numbers = line.split("\t")
    rows.setdefault((generator, keys, target), []).append([float(n) for n in numbers])
def med(values, i):
    return statistics.median(v[i] for v in values)
print("| generator | keys | target | decisions/s | p50 µs | p99 µs | fraction of ceiling | p99 / ceiling p99 | server CPU µs/decision | CPU / ceiling CPU | decisions/s min–max | p99 µs min–max | CPU µs min–max |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (generator, keys, target), values in rows.items():
    ceiling = rows[(generator, keys, "ceiling")]
    dps, p50, p99, cpu = (med(values, i) for i in range(4))
    span = lambda i: (min(v[i] for v in values), max(v[i] for v in values))
    print("| %s | %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.1f | %.2f | %.0f–%.0f | %.0f–%.0f | %.1f–%.1f |" % (
        generator, keys, target, dps, p50, p99, dps / med(ceiling, 0), p99 / med(ceiling, 2),
        cpu, cpu / med(ceiling, 3), *span(0), *span(2), *span(3)))
# Ours against limitador, in the same run: serve in memory against limitador in memory, and
# serve --redis (with leasing too, if asked) against limitador's `redis` and `redis_cached`
# storages on the same Redis; leasing against the plain path; and both in memory against
# nghttpd's trivial answer, HTTP/2's ceiling (h2load only).
pairs = [("memory", "limitador"), ("redis", "limitador-redis"), ("redis", "limitador-redis-cached"),
         ("redis-lease", "limitador-redis"), ("redis-lease", "limitador-redis-cached"),
         ("redis-lease", "redis"), ("memory", "nghttpd"), ("limitador", "nghttpd")]
lines = []
for (generator, keys, target), values in rows.items():
    for ours, peer in pairs:
        theirs = rows.get((generator, keys, peer))
        if target != ours or not theirs:
            continue
        ratios = [v[0] / t[0] for v, t in zip(values, theirs)]
        lines.append("| %s | %s | %s / %s | %.2f | %.2f–%.2f | %.2f | %.2f |" % (
            generator, keys, ours, peer, statistics.median(ratios), min(ratios), max(ratios),
            med(values, 2) / med(theirs, 2), med(values, 3) / med(theirs, 3)))
if lines:
    print()
    print("| generator | keys | ours / peer | decisions/s ratio (median of repeats) | min–max | p99 ratio | CPU per decision ratio |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
EOF
[ -n "$redis_note" ] && echo "!! $redis_note"
[ -n "$limitador_note" ] && echo "!! $limitador_note"
[ -n "$nghttpd_note" ] && echo "!! $nghttpd_note"
exit 0
