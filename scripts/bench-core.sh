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

fastest_ns() { # group function: the fastest sample, the least disturbed by other load
  local file="$criterion_dir/$1/$2/new/sample.json"
  [ -f "$file" ] && jq '[.iters as $i | .times | to_entries[] | .value / $i[.key]] | min' "$file"
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

printf '\n%-26s %-14s %8s %-16s %8s %6s %9s  %s\n' \
  case ours median peer median ratio "fastest" pairing
for group_dir in "$criterion_dir"/*/; do
  group=$(basename "$group_dir")
  [ "$group" = report ] && continue
  for pair in "${pairs[@]}"; do
    read -r ours peer note <<<"$pair"
    o=$(median_ns "$group" "$ours") || continue
    p=$(median_ns "$group" "$peer") || continue
    of=$(fastest_ns "$group" "$ours") || continue
    pf=$(fastest_ns "$group" "$peer") || continue
    awk -v g="$group" -v o="$ours" -v p="$peer" -v on="$o" -v pn="$p" -v of="$of" -v pf="$pf" \
      -v n="$note" 'BEGIN {
        printf "%-26s %-14s %8.1f %-16s %8.1f %6.2f %9.2f  %s\n", g, o, on, p, pn, on / pn, of / pf, n
      }'
  done
done
echo "(times in ns per check, criterion medians; ratio = ours / peer; fastest = ratio of the"
echo " fastest samples, less sensitive to other load on a shared machine)"

echo
nice -n 10 cargo build -q --release -p sluicegate --example memory_per_key >&2
for library in ours governor; do
  "${CARGO_TARGET_DIR:-target}/release/examples/memory_per_key" "$library"
done
