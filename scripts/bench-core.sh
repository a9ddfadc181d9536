#!/usr/bin/env bash
# Benchmarks of the core crate against governor, measured in the same run, then a table of
# ours / governor for each case and the memory per idle key at 1M keys.
#
#   scripts/bench-core.sh                 # every bench, short measurement times
#   scripts/bench-core.sh direct keyed    # only these bench binaries (direct, keyed, contended)
#   BENCH_ARGS="--measurement-time 10" scripts/bench-core.sh
#
# Runs under `nice`, as the machines are shared. Times are criterion's median estimates.
set -euo pipefail
cd "$(dirname "$0")/.."

benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(direct keyed contended)
args=(${BENCH_ARGS:---warm-up-time 1 --measurement-time 3})
criterion_dir="${CARGO_TARGET_DIR:-target}/criterion"

for bench in "${benches[@]}"; do
  nice -n 10 cargo bench -q -p sluicegate --bench "$bench" -- "${args[@]}" --noplot >&2
done

median_ns() { # group function
  local file="$criterion_dir/$1/$2/new/estimates.json"
  [ -f "$file" ] && jq '.median.point_estimate' "$file"
}

# Our variant, the governor variant it is compared with, and what the pairing means.
pairs=(
  "gcra governor default clocks (ours: Instant; governor: quanta TSC)"
  "token_bucket governor default clocks"
  "gcra governor_instant both on Instant"
  "token_bucket governor_instant both on Instant"
  "gcra_quanta governor both on quanta's TSC clock"
  "gcra_decide_at governor ours given the time (no clock read)"
)

printf '\n%-26s %-15s %10s %-17s %10s %7s  %s\n' case ours ns peer ns ratio pairing
for group_dir in "$criterion_dir"/*/; do
  group=$(basename "$group_dir")
  [ "$group" = report ] && continue
  for pair in "${pairs[@]}"; do
    read -r ours peer note <<<"$pair"
    o=$(median_ns "$group" "$ours") || continue
    p=$(median_ns "$group" "$peer") || continue
    awk -v g="$group" -v o="$ours" -v p="$peer" -v on="$o" -v pn="$p" -v n="$note" \
      'BEGIN { printf "%-26s %-15s %10.1f %-17s %10.1f %7.2f  %s\n", g, o, on, p, pn, on / pn, n }'
  done
done

echo
nice -n 10 cargo build -q --release -p sluicegate --example memory_per_key >&2
for library in ours governor; do
  "${CARGO_TARGET_DIR:-target}/release/examples/memory_per_key" "$library"
done
