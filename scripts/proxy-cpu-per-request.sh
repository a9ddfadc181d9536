#!/usr/bin/env bash
# CPU time per allowed request: `sluicegate proxy` against nginx `limit_req`, both in front of
# the same upstream (an nginx answering `return 200`), each loaded by wrk in turn (which goes
# first alternates). For each round it reads the run time the kernel accounts to every thread
# (`/proc/PID/task/TID/schedstat`: user and system time alike, in nanoseconds) of the server,
# of the upstream's workers and of wrk, over the middle of the round, and divides by the
# requests served meanwhile at wrk's average rate for the round, and the server's user-space
# part of it (`utime` in `/proc/PID/task/TID/stat`, in clock ticks: the kernel's part is the
# rest). On a machine whose CPUs the three share, the requests per second
# follow the sum; the server's part is what a proxy can change. Unlike wrk's requests per
# second, these figures barely move with how the scheduler interleaves the processes.
# Both proxies append the client to X-Forwarded-For alone, as scripts/bench-proxy.sh's do.
#
#   scripts/proxy-cpu-per-request.sh [rounds, default 6] [seconds per side and round, default 4]
#
# Environment: SLUICEGATE_BIN=path measures that binary (no build; by default
# scripts/build-pgo.sh builds the binary to ship, BENCH_BUILD=plain `cargo build --release`).
# Needs wrk and nginx (apt-get install wrk nginx), and for the default build what
# scripts/build-pgo.sh needs (h2load too: nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-6}"
duration="${2:-4}"
(( duration >= 3 )) || { echo "at least 3 seconds per side: the first and last are left out"; exit 1; }

command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)"; exit 1; }
[ -x /usr/sbin/nginx ] || { echo "nginx is needed (apt-get install nginx)"; exit 1; }
# No floor proxies here: set their paths so that bench-setup.sh builds none.
HYPER_FLOOR_BIN=unused LEAN_FLOOR_BIN=unused
source scripts/lib/bench-setup.sh

up=$(free_port)
nginx_start upstream "$up" "server { listen 127.0.0.1:$up; location / { return 200 'ok\n'; } }"
ng=$(free_port)
nginx_start limited "$ng" "limit_req_zone \$binary_remote_addr zone=z:10m rate=1000000r/s;
  upstream app { server 127.0.0.1:$up; keepalive 256; }
  server { listen 127.0.0.1:$ng; location / {
    limit_req zone=z burst=1000000 nodelay;
    proxy_http_version 1.1; proxy_set_header Connection \"\";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; proxy_pass http://app; } }"
sg=$(free_port)
mkdir -p "$work/sg"
printf 'limits:\n  z: { key: peer_ip, spec: "leaky-queue:rate=1000000/s,burst=1000000,nodelay" }\nroutes:\n  - { prefix: /, limits: [z], status: 503 }\n' \
  > "$work/sg/rules.yaml"
SLUICEGATE_LOG=warn "$sluicegate" proxy --upstream "http://127.0.0.1:$up" \
  --config "$work/sg/rules.yaml" --listen "127.0.0.1:$sg" --admin off \
  --forwarding-fields x-forwarded-for 2>>"$work/sg/stderr.log" &
pids+=($!)
sg_pid=$!
wait_port "$sg"

# run_ns PID...: the run time of every thread of those processes, summed.
run_ns() {
  local total=0 ns _
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*; do
      read -r ns _ < "$task/schedstat" || continue
      total=$((total + ns))
    done
  done
  echo "$total"
}

# user_ns PID...: the user-space part of that time (utime, in the kernel's clock ticks), in
# nanoseconds; the kernel's part is the rest. Read after the `)` that ends a thread's name,
# which may hold spaces.
user_ns() {
  local total=0 ticks pid task line
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*; do
      line=$(cat "$task/stat" 2>/dev/null) || continue
      ticks=$(echo "${line##*) }" | cut -d' ' -f12)
      total=$((total + ticks))
    done
  done
  echo $((total * 1000000000 / $(getconf CLK_TCK)))
}

for port in "$ng" "$sg"; do wrk -t2 -c64 -d1s "http://127.0.0.1:$port/" >/dev/null; done
# After the warm-up: nginx's master listens before it has forked its workers.
upstream_workers=$(pgrep -P "$nginx_master_upstream" | tr '\n' ' ')
limited_workers=$(pgrep -P "$nginx_master_limited" | tr '\n' ' ')

echo "| round | side | requests/s | p99 | server µs | of it user space µs | upstream µs | wrk µs | total µs |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$rounds"); do
  if (( round % 2 )); then order="nginx sluicegate"; else order="sluicegate nginx"; fi
  for side in $order; do
    if [ "$side" = nginx ]; then port=$ng; server=$limited_workers; else port=$sg; server=$sg_pid; fi
    # $server and $upstream_workers are lists of pids: split on purpose.
    # shellcheck disable=SC2086
    {
      wrk -t2 -c64 -d"${duration}s" --latency "http://127.0.0.1:$port/" > "$work/wrk.out" &
      wrk_pid=$!
      sleep 1
      s0=$(run_ns $server); su0=$(user_ns $server); u0=$(run_ns $upstream_workers)
      w0=$(run_ns "$wrk_pid"); t0=$(date +%s%N)
      sleep $((duration - 2))
      s1=$(run_ns $server); su1=$(user_ns $server); u1=$(run_ns $upstream_workers)
      w1=$(run_ns "$wrk_pid"); t1=$(date +%s%N)
      wait "$wrk_pid"
    }
    rps=$(awk '/^Requests\/sec/ {printf "%.0f", $2}' "$work/wrk.out")
    [ -n "$rps" ] || { echo "wrk printed no rate:"; cat "$work/wrk.out"; exit 1; }
    p99=$(awk '$1=="99%" {print $2}' "$work/wrk.out")
    awk -v round="$round" -v side="$side" -v rps="$rps" -v p99="$p99" -v s=$((s1 - s0)) \
      -v su=$((su1 - su0)) -v u=$((u1 - u0)) -v w=$((w1 - w0)) -v t=$((t1 - t0)) 'BEGIN {
        requests = rps * t / 1e9
        printf "| %d | %s | %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", round, side, rps, p99,
          s / requests / 1e3, su / requests / 1e3, u / requests / 1e3, w / requests / 1e3,
          (s + u + w) / requests / 1e3
      }' | tee -a "$work/rows"
  done
done
# The medians of each side's server time, and their ratio.
awk -F'|' '{ gsub(/ /, "", $3); times[$3] = times[$3] " " $6; user[$3] = user[$3] " " $7 }
  function median(list,   n, values, i, j, tmp) {
    n = split(list, values, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (values[j] + 0 < values[i] + 0) { tmp = values[i]; values[i] = values[j]; values[j] = tmp }
    return n % 2 ? values[(n + 1) / 2] : (values[n / 2] + values[n / 2 + 1]) / 2
  }
  END {
    ng = median(times["nginx"]); sg = median(times["sluicegate"])
    printf "median server µs per request: nginx %.2f, sluicegate %.2f, ratio %.3f\n", ng, sg, sg / ng
    ngu = median(user["nginx"]); sgu = median(user["sluicegate"])
    printf "of it in user space: nginx %.2f, sluicegate %.2f, ratio %.3f\n", ngu, sgu, sgu / ngu
  }' "$work/rows"
