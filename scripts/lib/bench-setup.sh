# Sourced from the repository's root by scripts/bench-proxy.sh and
# scripts/count-proxy-instructions.sh: the sluicegate binary and the two floor proxies to
# measure, a work directory and the processes to stop on exit, free ports, and waiting for a
# listener.

# $SLUICEGATE_BIN, or a release build of this tree.
if [ -n "${SLUICEGATE_BIN:-}" ]; then
  sluicegate="$SLUICEGATE_BIN"
else
  cargo build -q --release -p sluicegate-server --bin sluicegate
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
fi

# The floors: $HYPER_FLOOR_BIN and $LEAN_FLOOR_BIN, or release builds of this tree's examples.
floor_example() { # ENV-VALUE EXAMPLE: prints the binary's path
  if [ -n "$1" ]; then
    echo "$1"
  else
    cargo build -q --release -p sluicegate-http --example "$2" || return 1
    echo "${CARGO_TARGET_DIR:-target}/release/examples/$2"
  fi
}
floor_bin=$(floor_example "${HYPER_FLOOR_BIN:-}" hyper_floor_proxy)
lean_bin=$(floor_example "${LEAN_FLOOR_BIN:-}" httparse_floor_proxy)

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_port PORT [SECONDS, default 10]: returns once something accepts on PORT.
wait_port() {
  for _ in $(seq $(( ${2:-10} * 20 ))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1"; exit 1
}
