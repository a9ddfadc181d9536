# Sourced from the repository's root by scripts/bench-proxy.sh,
# scripts/count-proxy-instructions.sh and scripts/proxy-cpu-per-request.sh: the sluicegate
# binary and the two floor proxies to measure, then scripts/lib/processes.sh.

# $SLUICEGATE_BIN; or this tree's release binary as scripts/build-pgo.sh builds it (the one to
# ship); or, with BENCH_BUILD=plain, `cargo build --release` without the profile.
if [ -n "${SLUICEGATE_BIN:-}" ]; then
  sluicegate="$SLUICEGATE_BIN"
elif [ "${BENCH_BUILD:-pgo}" = plain ]; then
  cargo build -q --release -p sluicegate-server --bin sluicegate
  sluicegate="${CARGO_TARGET_DIR:-target}/release/sluicegate"
else
  sluicegate=$(scripts/build-pgo.sh)
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

source scripts/lib/processes.sh
