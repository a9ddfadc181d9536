#!/usr/bin/env bash
# The adaptive-limit benchmark (issues 13 and 33): every controller on every scenario in
# examples/adaptive/, each over a sweep of seeds, against no limit, the best fixed limit
# chosen in hindsight (a sweep, per seed) and the congestion-limiter crate's AIMD, Vegas and
# Gradient, all on the same simulated clients and server (seeded: the same numbers every
# run). Prints Markdown tables and the issue's targets, writes one plot per scenario (its
# file's seed) to docs/adaptive/, then times the 10-minute scenario through the
# `sluicegate simulate` command line.
#
#   scripts/bench-adaptive.sh                                  # every scenario, seeds 1, 2, 3
#   SEEDS=1,2,3,4,5 scripts/bench-adaptive.sh examples/adaptive/capacity-to-one.args
#
# Runs under `nice`, as the machines are shared. BENCH_PROFILE=bench builds without the
# release profile's whole-program optimisation (minutes faster; the simulation is
# deterministic, so the tables are the same bytes).
set -euo pipefail
cd "$(dirname "$0")/.."

scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(examples/adaptive/*.args)
seeds="${SEEDS:-1,2,3}"
profile="${BENCH_PROFILE:-release}"

nice -n 10 cargo build -q --profile "$profile" -p sluicegate-server --bin sluicegate --example bench_adaptive
# Cargo puts the bench profile's output in release/ too.
target="${CARGO_TARGET_DIR:-target}/release"
mkdir -p docs/adaptive
nice -n 10 "$target/examples/bench_adaptive" --seeds "$seeds" --plots docs/adaptive "${scenarios[@]}"

# The scenario files hold the command line's own flags, one a line.
ramp=$(grep -v '^#' examples/adaptive/slow-ramp.args | tr '\n' ' ')
for controller in none gradient2; do
  start=$(date +%s%N)
  # shellcheck disable=SC2086 # the flags are meant to split
  "$target/sluicegate" simulate --adaptive "$controller" $ramp > /dev/null
  echo "10-minute slow ramp through \`sluicegate simulate --adaptive $controller\`: $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
