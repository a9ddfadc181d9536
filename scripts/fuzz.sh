#!/usr/bin/env bash
# The long fuzz pass: every fuzz target (the tests named fuzz_*) in release mode, with
# 1,000,000 inputs per target by default, then a table of inputs, time and inputs/s per target.
# CI runs the same targets as ordinary tests with proptest's default 256 inputs.
#
#   scripts/fuzz.sh                      # 1,000,000 inputs per target
#   FUZZ_CASES=100000 scripts/fuzz.sh    # fewer
#   scripts/fuzz.sh json_                # only the targets whose name contains `json_`
#
# FUZZ_CASES sets the inputs of the in-process targets (proptest's PROPTEST_CASES);
# FUZZ_SLOW_CASES (default 10,000) those that cost a socket round trip or a process per input
# (loopback_*, simulate_command). FUZZ_THREADS (default 1) runs that many targets of one test
# binary at once; with 1, each target's inputs/s is one core's. A failing target prints its
# smallest failing input; the others still run, and the script exits 1.
#
# On a fresh machine it needs a Rust toolchain (cargo) and nothing else: the targets use
# loopback sockets only, and no Redis.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "fuzz.sh needs cargo (a Rust toolchain, e.g. from rustup)" >&2
  exit 2
fi

cases=${FUZZ_CASES:-1000000}
slow_cases=${FUZZ_SLOW_CASES:-10000}
threads=${FUZZ_THREADS:-1}
filter=${1:-fuzz_}

# The test binaries holding fuzz targets, as cargo selects them.
binaries=(
  "-p sluicegate --test fuzz_spec"
  "-p sluicegate-rules --test fuzz"
  "-p sluicegate-server --test fuzz_inputs"
  "-p sluicegate-server --test fuzz_simulate"
  "-p sluicegate-server --bin sluicegate"
)

echo "== building the fuzz targets (release)"
for binary in "${binaries[@]}"; do
  # shellcheck disable=SC2086
  cargo test --release $binary --no-run --quiet || exit 1
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
started=$(date +%s)
for binary in "${binaries[@]}"; do
  echo "== $binary: $filter ($cases inputs per target, $slow_cases for the slow ones)"
  # shellcheck disable=SC2086
  PROPTEST_CASES=$cases SLUICEGATE_FUZZ_SLOW_CASES=$slow_cases RUST_BACKTRACE=0 \
    cargo test --release $binary -- "$filter" --nocapture --test-threads="$threads" 2>&1 \
    | tee -a "$log" | grep -E 'fuzz [a-z_]+: [0-9]+ inputs|^test .*FAILED|failed:|smallest failing input'
  status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then
    failed+=("$binary")
  fi
done
elapsed=$(( $(date +%s) - started ))

echo
echo "== fuzz targets: inputs, seconds, inputs/s, accepted (a rule file loaded, a call answered, ...)"
grep -oE 'fuzz [a-z_]+: [0-9]+ inputs in [0-9.]+ s \([0-9]+ inputs/s\), [0-9]+ accepted' "$log" \
  | sed -E 's/^fuzz ([a-z_]+): ([0-9]+) inputs in ([0-9.]+) s \(([0-9]+) inputs\/s\), ([0-9]+) accepted$/\1 \2 \3 \4 \5/' \
  | awk '{ printf "%-26s %12d inputs %9.1f s %10d inputs/s %12d accepted\n", $1, $2, $3, $4, $5; total += $2 }
         END { printf "%-26s %12d inputs in all, %d s of wall time\n", "total", total, '"$elapsed"' }'
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (the smallest failing inputs are printed above)"
  exit 1
fi
