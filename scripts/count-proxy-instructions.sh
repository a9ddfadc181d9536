#!/usr/bin/env bash
# User-space instructions per proxied request: `sluicegate proxy` against nginx `limit_req`, each
# in front of the same upstream (an nginx answering `return 200`), each run under callgrind with
# one worker, each sent the same exact number of HTTP/1.1 requests by h2load. Counted
# instructions do not depend on the machine's load, so this separates a change's effect from the
# noise that wrk's requests per second carry on a shared machine (scripts/bench-proxy.sh).
# Both proxies append the client to X-Forwarded-For alone (nginx: proxy_add_x_forwarded_for;
# the proxy: --forwarding-fields x-forwarded-for, where its default appends to Forwarded too;
# BENCH_FORWARDING=both counts that default).
# Counted beside them, without any limit: nginx as a plain proxy, `sluicegate proxy` with no
# rules, and the least proxy on hyper (crates/sluicegate-http/examples/hyper_floor_proxy.rs,
# hyper's server and client and nothing else), which tell hyper's share from Sluicegate's, and
# the least HTTP/1.1 proxy loop without hyper (examples/httparse_floor_proxy.rs).
#
#   scripts/count-proxy-instructions.sh [requests, default 5000]
#
# Environment: SLUICEGATE_BIN=path counts that binary (by default scripts/build-pgo.sh builds
# the binary to ship; BENCH_BUILD=plain counts `cargo build --release`), HYPER_FLOOR_BIN=path
# and LEAN_FLOOR_BIN=path those floors (no build). Needs valgrind, nginx and
# h2load (apt-get install valgrind nginx nghttp2-client), and for the default build what
# scripts/build-pgo.sh needs (wrk too).
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-5000}"

for tool in valgrind callgrind_control h2load; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (apt-get install valgrind nghttp2-client)"; exit 1; }
done
[ -x /usr/sbin/nginx ] || { echo "nginx is needed (apt-get install nginx)"; exit 1; }
source scripts/lib/bench-setup.sh

# One worker, no master: the process callgrind counts.
single='master_process off; worker_processes 1;'

up=$(free_port)
/usr/sbin/nginx -p "$work" -c "$(nginx_conf upstream "$single" "server { listen 127.0.0.1:$up; location / { return 200 'ok\n'; } }")" -e stderr &
pids+=($!)
wait_port "$up"

# count NAME PORT COMMAND...: instructions per request of COMMAND (a server on PORT), counted
# from after a warm-up of 2000 requests to after `requests` more.
count() {
  local name="$1" port="$2"; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.%p" "$@" 2>"$work/$name.valgrind.log" &
  local pid=$!
  # This runs in a command substitution, whose exit the script's cleanup does not see.
  trap "kill $pid 2>/dev/null || true" EXIT
  wait_port "$port" 60
  h2load --h1 -n 2000 -c 4 "http://127.0.0.1:$port/" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local out
  out=$(h2load --h1 -n "$requests" -c 4 "http://127.0.0.1:$port/")
  grep -q "$requests succeeded" <<<"$out" || { echo "$name: not every request succeeded:"; echo "$out"; exit 1; }
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local total
  # Part 1: the dump after the measured requests (the zeroing dumps nothing).
  total=$(awk '/^summary:/ {print $2}' "$work/$name.$pid.1")
  awk -v t="$total" -v n="$requests" 'BEGIN{printf "%d", t/n}'
}

p_nginx=$(free_port)
nginx_per=$(count nginx "$p_nginx" /usr/sbin/nginx -p "$work" -e stderr -c "$(nginx_conf nginx "$single" "
limit_req_zone \$binary_remote_addr zone=z:10m rate=1000000r/s;
upstream app { server 127.0.0.1:$up; keepalive 256; }
server {
  listen 127.0.0.1:$p_nginx;
  location / {
    limit_req zone=z burst=1000000 nodelay;
    proxy_http_version 1.1; proxy_set_header Connection \"\";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_pass http://app;
  }
}")")

p_plain=$(free_port)
plain_per=$(count nginx-plain "$p_plain" /usr/sbin/nginx -p "$work" -e stderr -c "$(nginx_conf nginx-plain "$single" "
upstream app { server 127.0.0.1:$up; keepalive 256; }
server {
  listen 127.0.0.1:$p_plain;
  location / {
    proxy_http_version 1.1; proxy_set_header Connection \"\";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_pass http://app;
  }
}")")

p_floor=$(free_port)
floor_per=$(count hyper-floor "$p_floor" "$floor_bin" "127.0.0.1:$p_floor" "127.0.0.1:$up" 1)
p_lean=$(free_port)
lean_per=$(count httparse-floor "$p_lean" "$lean_bin" "127.0.0.1:$p_lean" "127.0.0.1:$up" 1)

# sg NAME RULES: `sluicegate proxy --workers 1` with those rules, counted.
sg() {
  local port; port=$(free_port)
  mkdir -p "$work/$1"
  printf '%s\n' "$2" > "$work/$1/rules.yaml"
  SLUICEGATE_LOG=warn count "$1" "$port" "$sluicegate" proxy --workers 1 \
    --upstream "http://127.0.0.1:$up" --config "$work/$1/rules.yaml" --listen "127.0.0.1:$port" --admin off \
    --forwarding-fields "${BENCH_FORWARDING:-x-forwarded-for}"
}
bare_per=$(sg sluicegate-bare 'routes:
  - { prefix: / }')
sg_per=$(sg sluicegate 'limits:
  z: { key: peer_ip, spec: "leaky-queue:rate=1000000/s,burst=1000000,nodelay" }
routes:
  - { prefix: /, limits: [z], status: 503 }')

echo "user-space instructions per request (callgrind, $requests requests, h2load --h1 -c 4):"
echo "| proxy | instructions per request |"
echo "|---|---|"
echo "| nginx limit_req (1 worker) | $nginx_per |"
echo "| sluicegate proxy (--workers 1) | $sg_per |"
echo "| nginx, plain proxy (no limit) | $plain_per |"
echo "| sluicegate proxy, no rules | $bare_per |"
echo "| hyper floor (server and client alone) | $floor_per |"
echo "| httparse floor (a proxy loop without hyper) | $lean_per |"
awk -v a="$sg_per" -v b="$nginx_per" 'BEGIN{printf "ratio sluicegate / nginx: %.2f\n", a/b}'
awk -v a="$floor_per" -v b="$plain_per" 'BEGIN{printf "ratio hyper floor / nginx plain: %.2f\n", a/b}'
awk -v a="$lean_per" -v b="$plain_per" 'BEGIN{printf "ratio httparse floor / nginx plain: %.2f\n", a/b}'
