#!/usr/bin/env bash
# Hostile input benchmark (issue 9; docs/design.md section 6, "Bounded"): can a client
# grow `sluicegate serve`'s memory or metric series without limit, or, by flooding it, reset a
# key that is limited? A benchmark, not a test: it prints figures and PASS/FAIL, and exits 0
# unless --strict is given.
#
# Starts `sluicegate serve --config examples/rules` (plus --serve-args, e.g. "--max-keys 100000")
# on free loopback ports, limits one key (a per-descriptor `limit` override of 1 per day on
# api/user=abuse-victim: the example rules hold no other key limited for longer than a spray
# takes), then sprays, over gRPC and then over /json, each transport naming things of its own:
#   users      --users unique users on api/user (its hour window is the example rules' longest,
#              so every key's state would live an hour),
#   overrides  --overrides distinct per-descriptor `limit` overrides (requests_per_unit N per hour),
#   domains    --domains unknown domains.
# Before and after each spray: the server's resident memory (VmRSS) and its metric series (lines
# of /metrics that are not comments). At the end: PASS/FAIL for peak memory (VmHWM) within
# --budget-mb, series not grown by the sprays beyond --series-slack, and the limited key still
# OVER_LIMIT.
#
# Usage: scripts/abuse.sh [--budget-mb MB] [--users N] [--overrides N] [--domains N]
#                         [--concurrency N] [--serve-args "ARGS"] [--series-slack N]
#                         [--bin-dir DIR] [--strict]
# --bin-dir uses already built sluicegate and abuse (the example) from DIR instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."

budget_mb=512
users=1000000
overrides=100000
domains=100000
concurrency=64
serve_args=""
series_slack=64
bin_dir=""
strict=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-mb) budget_mb="$2"; shift 2 ;;
    --users) users="$2"; shift 2 ;;
    --overrides) overrides="$2"; shift 2 ;;
    --domains) domains="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --serve-args) serve_args="$2"; shift 2 ;;
    --series-slack) series_slack="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --strict) strict=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
read -r -a extra_serve_args <<<"$serve_args"

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
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
  local port="$1" name="$2" pid="$3"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "$name did not start listening on port $port; its log:" >&2
  cat "$work/serve.log" >&2
  exit 1
}

grpc_port="$(free_port)"
http_port="$(free_port)"
grpc="http://127.0.0.1:$grpc_port"
http="http://127.0.0.1:$http_port"
echo "== sluicegate serve --config examples/rules ${serve_args}"
SLUICEGATE_LOG=warn "$sluicegate" serve --config examples/rules \
  --grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port" \
  "${extra_serve_args[@]}" >"$work/serve.log" 2>&1 &
server=$!
pids+=("$server")
wait_for_port "$grpc_port" "sluicegate serve" "$server"
wait_for_port "$http_port" "sluicegate serve (HTTP)" "$server"

# Resident and peak memory of the server, in MB.
rss_mb() {
  awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$server/status"
}
hwm_mb() {
  awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$server/status"
}
series() {
  "$abuse" metrics --http "$http" | sed -n 's/^series=\([0-9]*\).*/\1/p'
}
field() {
  sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"
}

started=$(date +%s)
victim="$("$abuse" victim --grpc "$grpc")"
echo "-- victim limited: $victim"
# The same key over /json: still limited, and /metrics now lists both transports' series.
echo "-- victim over /json: $("$abuse" victim --check --transport json --http "$http")"
reset_s="$(field reset_s "$victim")"

series_start="$(series)"
rss_start="$(rss_mb)"
rows="$work/rows.tsv"
: >"$rows"
alive=1
for kind in users overrides domains; do
  case "$kind" in
    users) count="$users" ;;
    overrides) count="$overrides" ;;
    domains) count="$domains" ;;
  esac
  offset=0
  for transport in grpc json; do
    rss_before="$(rss_mb)"
    series_before="$(series)"
    echo "-- spray $kind over $transport: $count calls, $concurrency in flight"
    if ! line="$("$abuse" spray --transport "$transport" --grpc "$grpc" --http "$http" \
      --kind "$kind" --count "$count" --offset "$offset" --concurrency "$concurrency")"; then
      line="calls=0 secs=0 per_sec=0 ok=0 over_limit=0 errors=$count"
    fi
    echo "   $line"
    if ! kill -0 "$server" 2>/dev/null; then
      echo "!! the server died during the spray; its log:" >&2
      tail -n 20 "$work/serve.log" >&2
      alive=0
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$transport" "$count" \
        "$(field secs "$line")" "$(field per_sec "$line")" "$(field ok "$line")" \
        "$(field over_limit "$line")" "$(field errors "$line")" "$rss_before" "died" \
        "$series_before → died" >>"$rows"
      break 2
    fi
    rss_after="$(rss_mb)"
    series_after="$(series)"
    echo "   RSS ${rss_before} → ${rss_after} MB, series ${series_before} → ${series_after}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$transport" "$count" \
      "$(field secs "$line")" "$(field per_sec "$line")" "$(field ok "$line")" \
      "$(field over_limit "$line")" "$(field errors "$line")" "$rss_before" "$rss_after" \
      "$series_before → $series_after" >>"$rows"
    offset=10000000
  done
done

verdicts=()
failed=0
verdict() {
  verdicts+=("$1: $2")
  [ "${2%% *}" = FAIL ] && failed=1
  return 0
}
if [ "$alive" = 1 ]; then
  peak="$(hwm_mb)"
  series_end="$(series)"
  check="$("$abuse" victim --check --grpc "$grpc")"
  elapsed=$(($(date +%s) - started))
  if [ "$peak" -le "$budget_mb" ]; then
    verdict "memory" "PASS (peak RSS $peak MB, budget $budget_mb MB)"
  else
    verdict "memory" "FAIL (peak RSS $peak MB, budget $budget_mb MB)"
  fi
  growth=$((series_end - series_start))
  if [ "$growth" -le "$series_slack" ]; then
    verdict "series" "PASS ($series_start → $series_end, +$growth, slack $series_slack)"
  else
    verdict "series" "FAIL ($series_start → $series_end, +$growth, slack $series_slack)"
  fi
  if grep -q 'code=OVER_LIMIT' <<<"$check"; then
    verdict "limited key" "PASS (still OVER_LIMIT)"
  elif [ "$elapsed" -ge "$reset_s" ]; then
    verdict "limited key" "n/a (its day window ended during the run: run again)"
  else
    verdict "limited key" "FAIL (now $(sed -n 's/.*code=\([A-Z_]*\).*/\1/p' <<<"$check"))"
  fi
else
  verdict "memory" "FAIL (the server died)"
  verdict "series" "FAIL (the server died)"
  verdict "limited key" "FAIL (the server died)"
fi

echo
echo "== sluicegate serve --config examples/rules ${serve_args}; $concurrency calls in flight; RSS at start $rss_start MB"
echo "| spray | transport | calls | s | calls/s | OK | OVER_LIMIT | errors | RSS before MB | RSS after MB | series |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r kind transport count secs per_sec ok over errors before after series_change; do
  echo "| $kind | $transport | $count | $secs | $per_sec | $ok | $over | $errors | $before | $after | $series_change |"
done <"$rows"
echo
for line in "${verdicts[@]}"; do echo "$line"; done
if [ "$strict" = 1 ] && [ "$failed" = 1 ]; then exit 1; fi
exit 0
