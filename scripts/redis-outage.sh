#!/usr/bin/env bash
# Redis outage benchmark (issue 9; docs/design.md section 8, "When Redis fails"): what
# `sluicegate serve --redis` answers, and how fast, while its Redis is killed and restarted.
#
# Starts a redis-server on a free loopback port and, for each failure policy (open, closed,
# local), a fresh `sluicegate serve --config examples/rules --redis redis://127.0.0.1:PORT
# --failure-policy P --redis-timeout-ms N` (plus --serve-args), then drives sustained load
# (`abuse sustain`: --clients callers back to back over /json or gRPC, users u0..u{--users - 1}
# on the api/user rule) for three phases of --phase-secs each:
#   before  Redis up,
#   during  redis-server killed (SIGKILL),
#   after   a new redis-server on the same port (empty: it keeps nothing on disk).
# Per policy and phase: answers per second, p99 and slowest answer, answers by code. And whether
# decisions went back to Redis after the restart: the new Redis holds counter keys at the end,
# and sluicegate_backend_errors did not grow over the after phase's last seconds.
#
# Usage: scripts/redis-outage.sh [--phase-secs S] [--clients N] [--users N]
#                                [--transport json|grpc] [--timeout-ms MS]
#                                [--policies "open closed local"] [--serve-args "ARGS"]
#                                [--bin-dir DIR]
# --bin-dir uses already built sluicegate and abuse (the example) from DIR instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."

phase_secs=5
clients=8
users=100
transport=json
timeout_ms=50
policies="open closed local"
serve_args=""
bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --phase-secs) phase_secs="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --users) users="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --timeout-ms) timeout_ms="$2"; shift 2 ;;
    --policies) policies="$2"; shift 2 ;;
    --serve-args) serve_args="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
read -r -a extra_serve_args <<<"$serve_args"
read -r -a policy_list <<<"$policies"
if [ "$phase_secs" -lt 3 ]; then
  echo "--phase-secs must be at least 3 (whole seconds)" >&2
  exit 2
fi

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server is not installed, so nothing was measured (Debian/Ubuntu: apt-get install redis-server)." >&2
  exit 1
fi

if [ -z "$bin_dir" ]; then
  echo "== building (release)"
  cargo build --release -q -p sluicegate-server --bin sluicegate --example abuse
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
  abuse="${CARGO_TARGET_DIR:-target}/release/examples/abuse"
else
  sluicegate="$bin_dir/sluicegate"
  abuse="$bin_dir/abuse"
fi
for bin in "$sluicegate" "$abuse"; do
  if [ ! -x "$bin" ]; then echo "$bin: not found or not executable" >&2; exit 1; fi
done

work="$(mktemp -d)"
redis_pid=""
server=""
load=""
cleanup() {
  for pid in "$load" "$server" "$redis_pid"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  done
  for pid in "$load" "$server" "$redis_pid"; do
    if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
  local port="$1" name="$2" pid="$3" log="$4"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "$name did not start listening on port $port; its log:" >&2
  cat "$log" >&2
  exit 1
}

redis_port="$(free_port)"
start_redis() {
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    >>"$work/redis-server.log" 2>&1 &
  redis_pid=$!
  wait_for_port "$redis_port" "redis-server" "$redis_pid" "$work/redis-server.log"
}

# One inline command to Redis, its reply's first line (no redis-cli needed).
redis_cmd() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$redis_port"
    printf '%s\r\n' "$*" >&3
    IFS= read -r reply <&3
    printf '%s\n' "${reply%$'\r'}"
  )
}

backend_errors() {
  "$abuse" metrics --http "$http" | sed -n 's/.*backend_errors=\([0-9]*\).*/\1/p'
}

start_redis
rows="$work/rows.tsv"
: >"$rows"
echo "== $clients clients over $transport, users u0..u$((users - 1)) on api/user, phases of ${phase_secs}s, --redis-timeout-ms $timeout_ms ${serve_args}"
for policy in "${policy_list[@]}"; do
  redis_cmd FLUSHALL >/dev/null
  grpc_port="$(free_port)"
  http_port="$(free_port)"
  http="http://127.0.0.1:$http_port"
  SLUICEGATE_LOG=warn "$sluicegate" serve --config examples/rules \
    --grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port" \
    --redis "redis://127.0.0.1:$redis_port" --failure-policy "$policy" \
    --redis-timeout-ms "$timeout_ms" "${extra_serve_args[@]}" >"$work/serve-$policy.log" 2>&1 &
  server=$!
  wait_for_port "$grpc_port" "sluicegate serve" "$server" "$work/serve-$policy.log"
  wait_for_port "$http_port" "sluicegate serve (HTTP)" "$server" "$work/serve-$policy.log"

  echo "-- policy $policy"
  ready="$work/ready-$policy"
  "$abuse" sustain --transport "$transport" --grpc "http://127.0.0.1:$grpc_port" --http "$http" \
    --clients "$clients" --users "$users" --phases 3 --phase-secs "$phase_secs" \
    --ready-file "$ready" >"$work/load-$policy.out" &
  load=$!
  until [ -e "$ready" ]; do
    if ! kill -0 "$load" 2>/dev/null; then echo "the load generator failed" >&2; exit 1; fi
    sleep 0.01
  done
  sleep "$phase_secs"
  kill -9 "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=""
  echo "   redis-server killed"
  sleep "$phase_secs"
  start_redis
  echo "   redis-server restarted"
  # The after phase's last seconds: from 1 s in to just before its end.
  sleep 1
  errors_from="$(backend_errors)"
  sleep "$((phase_secs - 2)).7"
  errors_to="$(backend_errors)"
  wait "$load"
  load=""
  keys="$(redis_cmd DBSIZE)"
  keys="${keys#:}"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""

  sed 's/^/   /' "$work/load-$policy.out"
  grown=$((errors_to - errors_from))
  if [ "$keys" -gt 0 ] && [ "$grown" -eq 0 ]; then
    back="yes ($keys keys in Redis, backend_errors +0 over the last $((phase_secs - 2)).7 s)"
  else
    back="NO ($keys keys in Redis, backend_errors +$grown over the last $((phase_secs - 2)).7 s)"
  fi
  echo "   back to Redis after restart: $back"
  phase=0
  for name in before during after; do
    line="$(grep "^phase=$phase " "$work/load-$policy.out")"
    field() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$line"; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$policy" "$name" "$(field per_sec)" \
      "$(field p99_ms)" "$(field max_ms)" "$(field ok)" "$(field over_limit)" "$(field errors)" \
      "$([ "$name" = after ] && echo "${back%% *}" || echo)" >>"$rows"
    phase=$((phase + 1))
  done
done

echo
echo "== $clients clients over $transport, $users users, phases of ${phase_secs}s (before: Redis up; during: killed; after: restarted), --redis-timeout-ms $timeout_ms ${serve_args}"
echo "| policy | phase | answers/s | p99 ms | slowest ms | OK | OVER_LIMIT | errors | back to Redis |"
echo "|---|---|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r policy name per_sec p99 max ok over errors back; do
  echo "| $policy | $name | $per_sec | $p99 | $max | $ok | $over | $errors | $back |"
done <"$rows"
exit 0
