#!/usr/bin/env bash
# The adaptive-limit benchmark (issue 13): every controller on every scenario in
# examples/adaptive/, against no limit, the best fixed limit chosen in hindsight (a sweep) and
# the congestion-limiter crate's AIMD, Vegas and Gradient, all on the same simulated clients
# and server (seeded: the same numbers every run). Prints Markdown tables and the targets met,
# writes one plot per scenario to docs/adaptive/, then times the 10-minute scenario through
# the `sluicegate simulate` command line.
#
#   scripts/bench-adaptive.sh                       # every scenario
#   scripts/bench-adaptive.sh examples/adaptive/capacity-halved.args
#
# Runs under `nice`, as the machines are shared.
set -euo pipefail
cd "$(dirname "$0")/.."

scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(examples/adaptive/*.args)

nice -n 10 cargo build -q --release -p sluicegate-server --bin sluicegate --example bench_adaptive
target="${CARGO_TARGET_DIR:-target}/release"
mkdir -p docs/adaptive
nice -n 10 "$target/examples/bench_adaptive" --plots docs/adaptive "${scenarios[@]}"

# The scenario files hold the command line's own flags, one a line.
ramp=$(grep -v '^#' examples/adaptive/slow-ramp.args | tr '\n' ' ')
for controller in none gradient2; do
  start=$(date +%s%N)
  # shellcheck disable=SC2086 # the flags are meant to split
  "$target/sluicegate" simulate --adaptive "$controller" $ramp > /dev/null
  echo "10-minute slow ramp through \`sluicegate simulate --adaptive $controller\`: $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
