#!/usr/bin/env bash
# A fleet on one Redis (BENCHMARKS.md, "Four instances on one Redis against limitador"): N
# instances of a rate limit service share one local redis-server, each loaded by its own
# rls_load, all on ONE hot key with a limit the fleet passes within the run. For each contender,
# one after another (Redis flushed between them), it reports decisions per second over the
# fleet and per instance, and how many calls were allowed against the most the limit permits
# over the run: the over-admission. Ours must show none.
#
# Contenders, each a fleet of --instances:
#   limitador `redis_cached`   counts locally, flushes to Redis every --flush-period ms; one
#                              fleet per period in --flush-periods (default 1000, its documented
#                              default, and 100)
#   limitador `redis`          a Redis round trip per decision
#   serve --redis              the plain path
#   serve --redis --redis-lease N            permit leasing, leases of up to N (--lease)
#   serve --redis --redis-lease 64           leasing at the library's default cap (the flag has
#                                            no default size: PERMITS is required, 0 is off)
#   serve --redis --redis-lease N --redis-over-limit-cache 1000
#                              leasing, and denials answered in the process (limitador's cached
#                              storage answers its denials locally too)
# every `serve` fleet once per failure policy in --failure-policies (default `local`, the
# shipped default, and `closed`): under `local` a call Redis does not answer within
# --redis-timeout-ms is decided in the process's memory, per replica, so a slow Redis lets a
# fleet pass the limit by design (docs/design.md, "When Redis fails"); the table counts those
# calls (the service's `sluicegate_backend_errors_total`) beside the over-admission. Under
# `closed` such a call is denied: any over-admission there is a bug.
#
# The limit: --limit per value of the descriptor entry `key` in a window of an hour. Ours counts
# fixed windows aligned to the Unix epoch (docs/design.md, "fixed window"); limitador's window
# starts at the counter's first hit (its Redis key's TTL). Before each fleet the script waits,
# if need be, for the next hour to start, so that the whole fleet's run lies inside one window
# of either: the limit then permits exactly --limit over the run (the script checks it after
# each run). Each instance is warmed up for 1 s on another domain (`warm`, a limit it never
# reaches: connections and scripts loaded), and the measured load runs without a warm-up of its
# own, so that every call that reaches the hot key is counted.
#
# Redis CPU per decision: redis-server's user and system time over the measured load (from
# /proc), over the fleet's decisions. "Redis count" is what Redis holds for the key after the
# fleet stopped (ours returns unused leased permits at shutdown; limitador `redis_cached` is
# read after a flush period, and drops what it had not flushed when stopped).
#
# Usage: scripts/bench-fleet.sh [--bin-dir DIR] [--instances N] [--duration S] [--lease N]
#                               [--limit N] [--concurrency N] [--connections N]
#                               [--flush-periods MS,MS] [--failure-policies P,P]
#                               [--redis-timeout-ms MS] [--only REGEX]
# --bin-dir uses already built sluicegate and rls_load from DIR (otherwise built in release, as
# scripts/bench-service.sh does). limitador-server comes from scripts/lib/limitador.sh
# (LIMITADOR_BIN=path uses a binary already built). --concurrency and --connections are per
# instance's load generator. --only keeps the contenders whose name matches REGEX.
set -euo pipefail
cd "$(dirname "$0")/.."

instances=4
duration=10
lease=1024
limit=20000
concurrency=64
connections=4
flush_periods=1000,100
failure_policies=local,closed
redis_timeout_ms=""
only=""
bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --instances) instances="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --lease) lease="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --flush-periods) flush_periods="$2"; shift 2 ;;
    --failure-policies) failure_policies="$2"; shift 2 ;;
    --redis-timeout-ms) redis_timeout_ms="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "bench-fleet.sh needs $tool" >&2; exit 1; }
done

if [ -z "$bin_dir" ]; then
  echo "== building (release)"
  cargo build --release -q -p sluicegate-server --bin sluicegate --example rls_load
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
  load="${CARGO_TARGET_DIR:-target}/release/examples/rls_load"
else
  sluicegate="$bin_dir/sluicegate"
  load="$bin_dir/rls_load"
fi
"$sluicegate" serve --help | grep -q -- '--redis-lease' \
  || { echo "$sluicegate has no 'serve --redis-lease': build a newer one" >&2; exit 1; }

source scripts/lib/processes.sh # $work, $pids (stopped on exit), free_port, wait_port
source scripts/lib/grpc-body.sh
source scripts/lib/limitador.sh
limitador="${LIMITADOR_BIN:-}"
[ -n "$limitador" ] || limitador="$(limitador_build)" \
  || { echo "no limitador-server (see scripts/lib/limitador.sh); LIMITADOR_BIN=path" >&2; exit 1; }

window=3600 # seconds: one hour, in both services' rules
mkdir -p "$work/rules" "$work/limitador"
write_bench_rules "$work/rules/bench.yaml" "$limit" hour bench
write_bench_rules "$work/rules/warm.yaml" 1000000000 hour warm
{ limitador_limit bench "$limit" "$window"; limitador_limit warm 1000000000 "$window"; } \
  >"$work/limitador/limits.yaml" # its own folder: limitador watches the file's directory

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  >"$work/redis-server.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
wait_port "$redis_port"
redis_url="redis://127.0.0.1:$redis_port"
rcli() { redis-cli -p "$redis_port" "$@"; }

# The contenders: name, kind (serve or limitador), and the arguments after the rules file (URL
# stands for Redis's).
names=()
declare -A kind args
add() {
  if [ -z "$only" ] || [[ "$1" =~ $only ]]; then
    names+=("$1"); kind[$1]="$2"; args[$1]="$3"
  fi
}
IFS=, read -r -a periods <<<"$flush_periods"
IFS=, read -r -a policies <<<"$failure_policies"
for period in "${periods[@]}"; do
  add "limitador redis_cached --flush-period $period" limitador "redis_cached --flush-period $period URL"
done
add "limitador redis" limitador "redis URL"
timeout_args=""
[ -n "$redis_timeout_ms" ] && timeout_args="--redis-timeout-ms $redis_timeout_ms"
for policy in "${policies[@]}"; do
  ours="--failure-policy $policy $timeout_args"
  add "serve --redis ($policy)" serve "$ours"
  add "serve --redis-lease $lease ($policy)" serve "--redis-lease $lease $ours"
  [ "$lease" != 64 ] && add "serve --redis-lease 64 ($policy)" serve "--redis-lease 64 $ours"
  add "serve --redis-lease $lease --redis-over-limit-cache 1000 ($policy)" serve \
    "--redis-lease $lease --redis-over-limit-cache 1000 $ours"
done
[ ${#names[@]} -gt 0 ] || { echo "--only $only matches no contender" >&2; exit 2; }

ticks_per_sec="$(getconf CLK_TCK)"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
field() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }

# Starts the fleet of contender $1: instance i listens for gRPC on grpc[i], HTTP on http[i].
fleet=()
grpc=()
http=()
start_fleet() {
  local name="$1" i extra
  extra="${args[$name]//URL/$redis_url}"
  fleet=(); grpc=(); http=()
  for i in $(seq 0 $((instances - 1))); do
    grpc[i]="$(free_port)"
    http[i]="$(free_port)"
    # shellcheck disable=SC2086 # the contender's arguments are words
    if [ "${kind[$name]}" = serve ]; then
      SLUICEGATE_LOG=warn "$sluicegate" serve --config "$work/rules" --no-admin \
        --grpc-addr "127.0.0.1:${grpc[i]}" --http-addr "127.0.0.1:${http[i]}" \
        --redis "$redis_url" $extra >"$work/instance.$i.log" 2>&1 &
    else
      RUST_LOG=error "$limitador" -b 127.0.0.1 -p "${grpc[i]}" -B 127.0.0.1 -P "${http[i]}" \
        "$work/limitador/limits.yaml" $extra >"$work/instance.$i.log" 2>&1 &
    fi
    fleet+=($!)
    pids+=($!)
  done
  for i in $(seq 0 $((instances - 1))); do wait_port "${grpc[i]}"; done
}

# Stops the fleet and forgets its pids (the exit's cleanup must not signal a reused pid).
stop_fleet() {
  local pid kept=()
  for pid in "${fleet[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${fleet[@]}"; do wait "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do [[ " ${fleet[*]} " == *" $pid "* ]] || kept+=("$pid"); done
  pids=("${kept[@]}")
  fleet=()
}

# Runs rls_load against every instance at once; instance i's output line in $work/load.$i.
load_fleet() {
  local domain="$1" seconds="$2" i status=0 loads=()
  for i in $(seq 0 $((instances - 1))); do
    "$load" --target "http://127.0.0.1:${grpc[i]}" --domain "$domain" --key key --keys 1 \
      --concurrency "$concurrency" --connections "$connections" --duration "$seconds" \
      --warmup 0 >"$work/load.$i" 2>&1 &
    loads+=($!)
  done
  for i in "${!loads[@]}"; do wait "${loads[i]}" || status=1; done
  return "$status"
}

# Sum of a counter family over every instance's /metrics (every label).
metric_sum() {
  local i total=0 value
  for i in $(seq 0 $((instances - 1))); do
    value="$(curl -s "http://127.0.0.1:${http[i]}/metrics" \
      | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { print s + 0 }')"
    total=$((total + value))
  done
  echo "$total"
}

# What Redis holds for the hot key: ours stores `window-start:count`, limitador a count.
redis_count() {
  local key value
  key="$(rcli --scan --pattern "${1}" | head -n 1)"
  [ -n "$key" ] || { echo 0; return; }
  value="$(rcli get "$key")"
  echo "${value##*:}"
}

results="$work/results.tsv"
: >"$results"
echo "== $instances instances per contender, each loaded by its own rls_load ($concurrency calls in flight over $connections connections), ${duration}s, one hot key, limit $limit per hour"
echo "== load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in "${names[@]}"; do
  rcli flushall >/dev/null
  # The fleet's whole run (start, warm-up, load, stop) inside one hour of the epoch.
  now="$(date +%s)"
  left=$((window - now % window))
  if [ "$left" -lt $((duration + 30)) ]; then
    echo "-- waiting ${left}s for the next hour: the run must not cross a window"
    sleep $((left + 1))
  fi
  echo "-- $name"
  start_fleet "$name"
  load_fleet warm 1 || { echo "!! warm-up failed:"; cat "$work"/load.*; exit 1; }
  # The service's counters also count the warm-up's calls: only what the load added is kept.
  if [ "${kind[$name]}" = serve ]; then
    policy_before="$(metric_sum sluicegate_backend_errors_total)"
    grants_before="$(metric_sum sluicegate_redis_lease_local_grants_total)"
  fi
  started="$(date +%s.%N)"
  cpu_before="$(cpu_ticks "$redis_pid")"
  load_ok=1
  load_fleet bench "$duration" || load_ok=0
  cpu_after="$(cpu_ticks "$redis_pid")"
  ended="$(date +%s.%N)"
  policy_answers="-"
  lease_grants="-"
  if [ "${kind[$name]}" = serve ]; then
    policy_answers=$(($(metric_sum sluicegate_backend_errors_total) - policy_before))
    lease_grants=$(($(metric_sum sluicegate_redis_lease_local_grants_total) - grants_before))
  elif [[ "$name" == *--flush-period* ]]; then
    sleep "$(awk -v ms="${name##* }" 'BEGIN { print ms / 1000 + 0.3 }')"
  fi
  stop_fleet
  if [ "${kind[$name]}" = serve ]; then
    counted="$(redis_count '*bench_key_k0_*')"
  else
    counted="$(redis_count 'namespace:{bench},counter:*')"
  fi
  lines=()
  for i in $(seq 0 $((instances - 1))); do
    lines+=("$(tail -n 1 "$work/load.$i")")
    echo "   ${lines[i]}"
  done
  [ "$load_ok" = 1 ] || { echo "!! a load generator failed (output above)"; exit 1; }
  # One window: ours, the same hour of the epoch from the first call to the last answer;
  # limitador's, from its first hit, longer than the run.
  windows=1
  if [ "$(awk -v a="$started" -v b="$ended" -v w="$window" \
    'BEGIN { print (int(a / w) == int(b / w)) ? 1 : 2 }')" != 1 ] && [ "${kind[$name]}" = serve ]; then
    windows=2
  fi
  {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s' "$name" "$windows" \
      "$((cpu_after - cpu_before))" "$policy_answers" "$lease_grants" "$counted" "$ended"
    for line in "${lines[@]}"; do
      printf '\t%s,%s,%s,%s' "$(field decisions_per_sec "$line")" "$(field ok "$line")" \
        "$(field over_limit "$line")" "$(field errors "$line")"
    done
    echo
  } >>"$results"
done
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
python3 - "$results" "$limit" "$ticks_per_sec" "$instances" <<'EOF'
import sys
results, limit, hz, instances = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print("| contender | instances | decisions/s total | per instance min–max | allowed | limit permits | over-admission | calls the failure policy answered | Redis count | granted from leases | errors | Redis CPU µs/decision |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
bugs = []
for row in open(results):
    name, windows, ticks, policy, grants, counted, _, *loads = row.rstrip("\n").split("\t")
    loads = [[float(x) for x in l.split(",")] for l in loads]
    rates = [l[0] for l in loads]
    allowed = sum(int(l[1]) for l in loads)
    decisions = sum(int(l[1]) + int(l[2]) for l in loads)
    errors = sum(int(l[3]) for l in loads)
    permits = limit * int(windows)
    denied = decisions - allowed
    if allowed >= permits:
        over = "{:,}".format(allowed - permits)
    elif denied:
        # Denied with permits left over: charged in Redis but answered denied (a call that
        # timed out under `closed`), or held unused in another instance's lease.
        over = "0 ({:,} under)".format(permits - allowed)
    else:
        over = "limit not reached"
    cpu = int(ticks) / hz * 1e6 / decisions if decisions else float("nan")
    granted = "-" if grants == "-" else "{:.1%}".format(int(grants) / decisions if decisions else 0)
    policy_text = policy if policy == "-" else "{:,}".format(int(policy))
    print("| {} | {} | {:,.0f} | {:,.0f}–{:,.0f} | {:,} | {:,}{} | {} | {} | {:,} | {} | {:,} | {:.1f} |".format(
        name, instances, sum(rates), min(rates), max(rates), allowed, permits,
        "" if windows == "1" else " (2 windows)", over, policy_text, int(counted), granted,
        errors, cpu))
    if name.startswith("serve") and allowed > permits:
        # Under `local` a call answered by the policy may be allowed in the process: only an
        # over-admission beyond those calls is unexplained.
        answered = 0 if policy == "-" else int(policy)
        if "(local)" not in name or allowed - permits > answered:
            bugs.append("%s: allowed %d, the limit permits %d, the failure policy answered %s"
                        % (name, allowed, permits, policy))
for bug in bugs:
    print("\n!! OVER-ADMISSION NOT EXPLAINED BY THE FAILURE POLICY (a bug): " + bug)
EOF
