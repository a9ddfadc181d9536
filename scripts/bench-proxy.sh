#!/usr/bin/env bash
# `sluicegate proxy` against nginx `limit_req`, both in front of the same upstream, with wrk on
# loopback (issue 11). Nine setups, measured in pairs:
#   upstream      wrk -> upstream (an nginx answering `return 200`)
#   proxy-bare    wrk -> sluicegate proxy, no rules -> upstream     (the proxy's own overhead)
#   nginx-allow   wrk -> nginx limit_req (rate far above the load) -> upstream
#   sg-allow      wrk -> sluicegate proxy, the same rule            -> upstream
#   nginx-deny    wrk -> nginx limit_req rate=1r/s (nearly all 503) -> upstream
#   sg-deny       wrk -> sluicegate proxy, the same rule
#   nginx-plain   wrk -> nginx as a plain proxy (no limit)          -> upstream
#   hyper-floor   wrk -> the least proxy on hyper (crates/sluicegate-http/examples/
#                        hyper_floor_proxy.rs: hyper's server and client, nothing else) -> upstream
#   httparse-floor wrk -> the least HTTP/1.1 proxy loop without hyper (crates/sluicegate-http/
#                        examples/httparse_floor_proxy.rs: httparse, Content-Length only) -> upstream
# Every nginx that proxies appends the client to X-Forwarded-For, as a reverse proxy's
# configuration does and scripts/count-proxy-instructions.sh's nginx did already, and every
# `sluicegate proxy` appends it alone (`--forwarding-fields x-forwarded-for`; its default
# appends to `Forwarded` too): both send the upstream the same request.
# Each pair (upstream / proxy-bare, nginx-allow / sg-allow, nginx-deny / sg-deny,
# nginx-plain / hyper-floor: how near hyper alone comes to nginx here, nginx-plain /
# httparse-floor: how near a proxy that parses HTTP/1.1 itself comes) is measured
# in rounds, the two sides one right after the other (which goes first alternates), and each
# round gives its own ratio: a slow spell of this shared machine then slows both sides of the
# rounds it falls in instead of one side of the comparison. A run prints, per pair, the median
# of the rounds' ratios (requests/s and p99) with their min–max, and each side's median
# requests/s and p99.
#
#   scripts/bench-proxy.sh [seconds per side and round, default 3] [connections, default 64]
#
# Environment: BENCH_PAIRS="allow deny" measures only those pairs (default all five: allow deny
# bare floor lean; also `plain`: nginx as a plain proxy against `sluicegate proxy` with no
# rules, what the proxy costs without any limit; and `floor-allow`: nginx `limit_req` against
# hyper's floor, how much room the allowed target leaves the proxy over hyper's own work),
# BENCH_ROUNDS=9 rounds per pair and run (default 9), BENCH_RUNS=3 runs (default 3),
# SLUICEGATE_PROXY_ARGS="--workers 2" adds arguments to every `sluicegate proxy`,
# BENCH_FORWARDING=both the fields every `sluicegate proxy` appends the client to (default
# x-forwarded-for: the upstream then gets from it the request nginx sends, whose
# configuration appends to X-Forwarded-For alone; the proxy's own default also appends to
# Forwarded),
# SLUICEGATE_BIN=path measures that binary (no build; by default scripts/build-pgo.sh builds
# the binary to ship, and BENCH_BUILD=plain measures `cargo build --release` instead),
# HYPER_FLOOR_BIN=path and LEAN_FLOOR_BIN=path those floor proxies. Needs wrk and nginx
# (apt-get install wrk nginx), and for the default build what scripts/build-pgo.sh needs
# (h2load too: nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-3}"
connections="${2:-64}"
threads=2

command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)"; exit 1; }
[ -x /usr/sbin/nginx ] || { echo "nginx is needed (apt-get install nginx)"; exit 1; }
source scripts/lib/bench-setup.sh

# proxy NAME PORT RULES
proxy_start() {
  local dir="$work/$1"; mkdir -p "$dir"
  printf '%s\n' "$3" > "$dir/rules.yaml"
  SLUICEGATE_LOG=warn "$sluicegate" proxy --upstream "http://127.0.0.1:$up" \
    --config "$dir/rules.yaml" --listen "127.0.0.1:$2" --admin off \
    --forwarding-fields "${BENCH_FORWARDING:-x-forwarded-for}" ${SLUICEGATE_PROXY_ARGS:-} \
    2>>"$dir/stderr.log" &
  pids+=($!)
  wait_port "$2"
}

up=$(free_port); nginx_start upstream "$up" "server { listen 127.0.0.1:$up; location / { return 200 'ok\n'; } }"

limit_nginx() { # PORT RATE EXTRA
  cat <<CONF
limit_req_zone \$binary_remote_addr zone=z:10m rate=$2;
upstream app { server 127.0.0.1:$up; keepalive 256; }
server {
  listen 127.0.0.1:$1;
  location / {
    limit_req zone=z $3;
    proxy_http_version 1.1; proxy_set_header Connection "";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_pass http://app;
  }
}
CONF
}
limit_rules() { # SPEC
  printf 'limits:\n  z: { key: peer_ip, spec: "%s" }\nroutes:\n  - { prefix: /, limits: [z], status: 503 }\n' "$1"
}

p_bare=$(free_port); proxy_start bare "$p_bare" 'routes:
  - { prefix: / }'
n_allow=$(free_port); nginx_start nginx-allow "$n_allow" "$(limit_nginx "$n_allow" 1000000r/s "burst=1000000 nodelay")"
s_allow=$(free_port); proxy_start sg-allow "$s_allow" "$(limit_rules 'leaky-queue:rate=1000000/s,burst=1000000,nodelay')"
n_deny=$(free_port); nginx_start nginx-deny "$n_deny" "$(limit_nginx "$n_deny" 1r/s "")"
s_deny=$(free_port); proxy_start sg-deny "$s_deny" "$(limit_rules 'leaky-queue:rate=1/s')"

n_plain=$(free_port); nginx_start nginx-plain "$n_plain" "upstream app { server 127.0.0.1:$up; keepalive 256; }
server {
  listen 127.0.0.1:$n_plain;
  location / {
    proxy_http_version 1.1; proxy_set_header Connection \"\";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; proxy_pass http://app;
  }
}"
h_floor=$(free_port)
"$floor_bin" "127.0.0.1:$h_floor" "127.0.0.1:$up" "$(nproc)" 2>>"$work/floor.log" &
pids+=($!)
wait_port "$h_floor"
l_floor=$(free_port)
"$lean_bin" "127.0.0.1:$l_floor" "127.0.0.1:$up" "$(nproc)" 2>>"$work/lean.log" &
pids+=($!)
wait_port "$l_floor"

declare -A port=([upstream]=$up [proxy-bare]=$p_bare [nginx-allow]=$n_allow [sg-allow]=$s_allow [nginx-deny]=$n_deny [sg-deny]=$s_deny [nginx-plain]=$n_plain [hyper-floor]=$h_floor [httparse-floor]=$l_floor)
declare -A pair=([bare]="upstream proxy-bare" [allow]="nginx-allow sg-allow" [deny]="nginx-deny sg-deny" [floor]="nginx-plain hyper-floor" [lean]="nginx-plain httparse-floor" [plain]="nginx-plain proxy-bare" [floor-allow]="nginx-allow hyper-floor")
read -r -a pairs <<<"${BENCH_PAIRS:-allow deny bare floor lean}"
rounds="${BENCH_ROUNDS:-9}"
runs="${BENCH_RUNS:-3}"

# One wrk run: "requests/s p99_ms non2xx".
measure() {
  local out
  out=$(wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "http://127.0.0.1:$1/" 2>&1)
  local rps p99 non2xx
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "$rps $p99 ${non2xx:-0}"
}

minmax() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk 'NR==1{min=$1} {max=$1} END{printf "%.2f–%.2f", min, max}'; }
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }

echo "wrk -t$threads -c$connections -d${duration}s per side, $rounds rounds per pair, $runs runs;"
echo "ratio = measured side / peer side, per round; median (min–max over the rounds)."
echo
echo "| run | pair: peer / measured | req/s ratio | p99 ratio | peer req/s, p99 ms | measured req/s, p99 ms |"
echo "|---|---|---|---|---|---|"
for run in $(seq "$runs"); do
  for name in "${pairs[@]}"; do
    read -r peer ours <<<"${pair[$name]}"
    # Warm the keep-alive pools and the limiters.
    for s in "$peer" "$ours"; do
      wrk -t1 -c"$connections" -d1s "http://127.0.0.1:${port[$s]}/" >/dev/null 2>&1
    done
    rps_ratios=""; p99_ratios=""; peer_rps=""; peer_p99=""; our_rps=""; our_p99=""
    for round in $(seq "$rounds"); do
      if (( round % 2 )); then order="$peer $ours"; else order="$ours $peer"; fi
      declare -A got=()
      for s in $order; do
        read -r rps p99 non2xx < <(measure "${port[$s]}")
        got[$s]="$rps $p99"
        echo "run $run round $round  $s: $rps req/s, p99 $p99 ms, non-2xx $non2xx" >&2
      done
      read -r prps pp99 <<<"${got[$peer]}"
      read -r orps op99 <<<"${got[$ours]}"
      rps_ratios+="$(ratio "$orps" "$prps") "; p99_ratios+="$(ratio "$op99" "$pp99") "
      peer_rps+="$prps "; peer_p99+="$pp99 "; our_rps+="$orps "; our_p99+="$op99 "
    done
    printf '| %s | %s: %s / %s | **%.2f** (%s) | %.2f (%s) | %.0f, %.2f | %.0f, %.2f |\n' \
      "$run" "$name" "$peer" "$ours" \
      "$(median "$rps_ratios")" "$(minmax "$rps_ratios")" \
      "$(median "$p99_ratios")" "$(minmax "$p99_ratios")" \
      "$(median "$peer_rps")" "$(median "$peer_p99")" "$(median "$our_rps")" "$(median "$our_p99")"
  done
done
