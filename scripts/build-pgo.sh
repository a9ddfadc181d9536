#!/usr/bin/env bash
# The `sluicegate` release binary, built with profile-guided optimisation (PGO), the build to
# ship and the one the proxy's benchmark scripts measure. Three steps:
#   1. a release build instrumented to count which branches and calls run;
#   2. a training run: the proxy and the service, each under a few seconds of several kinds of
#      load (below), then stopped with SIGTERM, which writes the counts;
#   3. the release build again, with the counts, so that the compiler inlines and lays out what
#      runs most. On the proxy this is about a seventh fewer instructions per request than
#      `cargo build --release` (BENCHMARKS.md).
# Its flags replace .cargo/config.toml's (cargo takes CARGO_ENCODED_RUSTFLAGS over them): the
# profile already inlines the hot calls, and the higher inline threshold there gained nothing
# (24,244 against 24,198 instructions per proxied request).
# Each run trains and builds again (on two cores about 7 minutes, 3.5 once the instrumented
# build is cached). Prints the binary's path (build output goes to stderr):
#
#   scripts/build-pgo.sh      # -> /abs/path/${CARGO_TARGET_DIR:-target}/pgo/release/sluicegate
#
# The training covers the proxy over HTTP/1.1 and h2: GETs allowed and denied, POST bodies, a
# route with two limits (a header and path tuple, and a concurrency limit on the client address
# from X-Forwarded-For); and the service: ShouldRateLimit over gRPC and POST /json, in memory.
# Not Redis, the remote-RLS backend or the admin page: their code is built as without PGO.
# Environment: PGO_SECONDS per load (default 3). Needs rustup's llvm-tools (added here when
# missing: llvm-profdata must read what this rustc's LLVM writes), nginx (the proxy's upstream),
# wrk and h2load (apt-get install nginx wrk nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${PGO_SECONDS:-3}"

for tool in wrk h2load; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (apt-get install wrk nghttp2-client)" >&2; exit 1; }
done
[ -x /usr/sbin/nginx ] || { echo "nginx is needed (apt-get install nginx)" >&2; exit 1; }
sysroot=$(rustc --print sysroot)
profdata=$(find "$sysroot/lib/rustlib" -name llvm-profdata -type f | head -n 1)
if [ -z "$profdata" ]; then
  rustup component add llvm-tools >&2
  profdata=$(find "$sysroot/lib/rustlib" -name llvm-profdata -type f | head -n 1)
fi
[ -n "$profdata" ] || { echo "no llvm-profdata after rustup component add llvm-tools" >&2; exit 1; }

target="${CARGO_TARGET_DIR:-target}"
profiles="$(pwd)/$target/pgo-profiles"
[[ "$target" = /* ]] && profiles="$target/pgo-profiles"
rm -rf "$profiles"
mkdir -p "$profiles/raw"

# with_flag FLAG: the caller's RUSTFLAGS and FLAG, as cargo's CARGO_ENCODED_RUSTFLAGS (one
# flag per 0x1f-separated field), so that a path with a space in FLAG stays one flag.
with_flag() {
  local flag encoded=""
  for flag in ${RUSTFLAGS:-}; do encoded+="$flag"$'\x1f'; done
  printf '%s' "$encoded$1"
}

echo "== PGO 1/3: instrumented build" >&2
CARGO_ENCODED_RUSTFLAGS=$(with_flag "-Cprofile-generate=$profiles/raw") \
  CARGO_TARGET_DIR="$target/pgo-instrumented" \
  cargo build -q --release -p sluicegate-server --bin sluicegate >&2
instrumented="$target/pgo-instrumented/release/sluicegate"

echo "== PGO 2/3: training, ${seconds}s per load" >&2
source scripts/lib/processes.sh
source scripts/lib/grpc-body.sh
export LLVM_PROFILE_FILE="$profiles/raw/sluicegate-%p.profraw"
export SLUICEGATE_LOG=warn

up=$(free_port)
nginx_start upstream "$up" "server { listen 127.0.0.1:$up; location / { return 200 'ok\n'; } }"

cat > "$work/proxy.yaml" <<'YAML'
client_ip:
  header: x-forwarded-for
  trusted_proxies: [127.0.0.0/8]
limits:
  per_ip: { key: peer_ip, spec: "leaky-queue:rate=1000000/s,burst=1000000,nodelay" }
  # A burst of a second's worth: a burst of one millisecond denies the odd request on a loaded
  # machine, where a thread that read the clock is descheduled before it decides (a stale
  # `now` is an early arrival), and a training load with a failed request stops the build.
  tenant: { key: [{ header: x-tenant }, path], spec: "gcra:rate=1000000/s,burst=1000000" }
  client_conn: { key: client_ip, spec: "concurrency:limit=1000" }
  strict: { key: peer_ip, spec: "leaky-queue:rate=1/s" }
routes:
  - prefix: /api/
    limits: [tenant, client_conn]
  - prefix: /deny
    limits: [strict]
    status: 503
  - prefix: /
    limits: [per_ip]
    status: 503
YAML
proxy=$(free_port)
"$instrumented" proxy --upstream "http://127.0.0.1:$up" --config "$work/proxy.yaml" \
  --listen "127.0.0.1:$proxy" --admin off &
proxy_pid=$!
pids+=("$proxy_pid")
wait_port "$proxy"

head -c 4096 /dev/zero | tr '\0' x > "$work/upload"
url="http://127.0.0.1:$proxy"
api=(-H "x-tenant: t1" -H "x-forwarded-for: 10.1.2.3")
# run LOAD...: runs a wrk or h2load command, and stops the build if any request of it failed
# (both exit 0 on failed requests), so that no profile is trained on errors.
run() {
  if ! "$@" >"$work/load.out" 2>&1 || grep -q "Socket errors" "$work/load.out" ||
    { [ "$1" = h2load ] && ! grep -q ", 0 failed, 0 errored, 0 timeout" "$work/load.out"; }; then
    echo "training load failed: $*" >&2
    cat "$work/load.out" >&2
    exit 1
  fi
}
run wrk -t2 -c64 -d"${seconds}s" "$url/"
run wrk -t2 -c64 -d"${seconds}s" "$url/deny"
run wrk -t2 -c32 -d"${seconds}s" "${api[@]}" "$url/api/items"
run h2load -c 8 -m 16 -D "$seconds" "$url/"
run h2load -c 4 -m 8 -D "$seconds" "${api[@]}" -d "$work/upload" "$url/api/upload"
run h2load --h1 -c 16 -D "$seconds" "${api[@]}" -d "$work/upload" "$url/api/upload"

mkdir -p "$work/rules"
cat > "$work/rules/train.yaml" <<'YAML'
domain: train
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 1000000 }
  - key: plan
    rate_limits:
      - { unit: second, requests_per_unit: 100 }
      - { unit: hour, requests_per_unit: 1000000 }
YAML
grpc=$(free_port); http=$(free_port)
"$instrumented" serve --config "$work/rules" --grpc-addr "127.0.0.1:$grpc" \
  --http-addr "127.0.0.1:$http" --no-admin &
serve_pid=$!
pids+=("$serve_pid")
wait_port "$grpc"
wait_port "$http"
for entry in "user u1" "plan free"; do
  write_grpc_body "$work/call.grpc" train $entry # split on purpose: KEY VALUE
  run h2load -c 4 -m 16 -D "$seconds" -d "$work/call.grpc" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://127.0.0.1:$grpc/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
done
printf '{"domain":"train","descriptors":[{"entries":[{"key":"user","value":"u2"}]}]}' > "$work/call.json"
run h2load --h1 -c 16 -D "$seconds" -d "$work/call.json" -H 'content-type: application/json' \
  "http://127.0.0.1:$http/json"

# SIGTERM: both shut down gracefully, and the counts are written as each process exits.
kill -TERM "$proxy_pid" "$serve_pid"
wait "$proxy_pid" || { echo "the instrumented proxy did not exit cleanly" >&2; exit 1; }
wait "$serve_pid" || { echo "the instrumented service did not exit cleanly" >&2; exit 1; }
pids=("$nginx_master_upstream") # what is left to stop on exit
# Only the training's counts: the build scripts and proc macros of step 1 were instrumented too.
"$profdata" merge -o "$profiles/merged.profdata" "$profiles"/raw/sluicegate-*.profraw
# Cargo does not see a profile's contents change, only the flags: a path named by the
# contents' hash makes each new profile rebuild everything with it.
sum=$(sha256sum "$profiles/merged.profdata" | cut -c1-16)
mv "$profiles/merged.profdata" "$profiles/$sum.profdata"

echo "== PGO 3/3: optimised build" >&2
CARGO_ENCODED_RUSTFLAGS=$(with_flag "-Cprofile-use=$profiles/$sum.profdata") \
  CARGO_TARGET_DIR="$target/pgo" cargo build -q --release -p sluicegate-server --bin sluicegate >&2
echo "$(cd "$target/pgo/release" && pwd)/sluicegate"
