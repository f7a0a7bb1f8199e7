#!/usr/bin/env bash
# What an NCCL profiler plugin costs collscope's runtime: `collscope perf all_reduce` at 8 B and 1 MiB, NRANKS
# ranks as processes over NET/Socket (so proxy operations and steps are profiled too), without a plugin and with
# collscope's own (libcollscope_profiler.so, NCCL_PROFILER_PLUGIN), in pairs, REPS pairs each. Prints the median
# of perf's own out-of-place time per size and the median of the pairs' with/without ratios (a pair runs back to
# back, so the machine's drift hits both alike).
#   bench/profiler_overhead.sh [--reps N] [--nranks N] [--plugin PATH]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
reps=7 nranks=4 plugin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift;;
    --nranks) nranks=$2; shift;;
    --plugin) plugin=$2; shift;;
    *) sed -n '2,7p' "$0"; exit 2;;
  esac
  shift
done
(cd "$root" && cargo build --release --quiet --bin collscope && cargo build --release --quiet -p collscope-profiler)
# Where cargo put them: CARGO_TARGET_DIR when set (relative to the repository, where cargo ran), else target/.
release="$(cd "$root" && realpath -m "${CARGO_TARGET_DIR:-target}")/release"
bin=$release/collscope
plugin=${plugin:-$release/libcollscope_profiler.so}
[ -f "$plugin" ] || { echo "bench/profiler_overhead.sh: no plugin at $plugin" >&2; exit 2; }

# One run: the out-of-place time (us) perf prints for SIZE.
run() { # SIZE ITERS [env...]
  local size=$1 iters=$2
  shift 2
  env "$@" "$bin" perf all_reduce --nranks "$nranks" --launch processes --transport socket \
    -b "$size" -e "$size" -n "$iters" -w 20 -c 0 | awk '!/^#/ && NF == 13 { print $6 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%10s %14s %14s %8s\n' size "without (us)" "with (us)" ratio
for spec in 8:10000 1048576:1000; do
  size=${spec%:*} iters=${spec#*:}
  off=() on=() ratios=()
  for _ in $(seq "$reps"); do
    a=$(run "$size" "$iters" NCCL_PROFILER_PLUGIN=none)
    b=$(run "$size" "$iters" NCCL_PROFILER_PLUGIN="$plugin")
    off+=("$a") on+=("$b") ratios+=("$(echo "$b / $a" | bc -l)")
  done
  a=$(printf '%s\n' "${off[@]}" | median) b=$(printf '%s\n' "${on[@]}" | median)
  printf '%10s %14s %14s %8.3f\n' "$size" "$a" "$b" "$(printf '%s\n' "${ratios[@]}" | median)"
done
