#!/usr/bin/env bash
# The CPU backend's step at 1, 2 and 4 ranks against what it needs, measured
# in the same run (bench/bench_cpu_step.cpp): its collectives against plain
# MPI calls of the same bytes (blocking path, and the watchdog path of
# collective_timeout_ms), the Adam pass against memcpy, the Adam-only step
# against its floor; then the small models' step latency against theirs.
# Usage: bench/run_cpu_step_bench.sh [build-dir] [params]   (defaults: build, 50M)
#   RANKS="1 2 4"  REPS=5  ITERS=200  PARTS="comm model"
set -euo pipefail
build=${1:-build}
params=${2:-50M}
exe=$build/bench/bench_cpu_step
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks_list=${RANKS:-1 2 4}
parts=${PARTS:-comm model}  # which tables
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo ?)"
echo "# ratios: plain time / dmuon time (goal >= 0.9 for collectives, >= 0.7 for the bf16 Adam pass); step/floor: floor = plain all-reduce + fp32 Adam pass (wall time; the Adam ratios are in CPU time)"
printf '%-5s %-6s | %8s %8s %6s %6s | %8s %8s %6s %6s | %6s %6s | %8s %8s %6s\n' ranks params ar_ms dm_ms ratio wdog \
  rsag_ms dm_ms ratio wdog adam32 adam16 step_ms floor_ms ratio
for ranks in $ranks_list; do
  [[ " $parts " == *" comm "* ]] || break
  line=$(OPENBLAS_NUM_THREADS=1 mpirun --oversubscribe -np "$ranks" "$exe" --mode comm --params "$params" \
           --reps "${REPS:-5}" | grep '^comm')
  get() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  # One rank: dmuon runs no collective, so its ratios say nothing.
  ratio() { if ((ranks == 1)); then echo -; else get "$1"; fi; }
  printf '%-5s %-6s | %8s %8s %6s %6s | %8s %8s %6s %6s | %6s %6s | %8s %8s %6s\n' "$ranks" "$params" \
    "$(get allreduce_ms)" "$(get dmuon_allreduce_ms)" "$(ratio ar_ratio)" "$(ratio ar_watchdog_ratio)" \
    "$(get rsag_ms)" "$(get dmuon_rsag_ms)" "$(ratio rsag_ratio)" "$(ratio rsag_watchdog_ratio)" \
    "$(get adam_fp32_ratio)" "$(get adam_bf16_ratio)" "$(get step_ms)" "$(get floor_ms)" "$(get step_over_floor)"
done
echo
echo "# small models: median step latency against its floor (one plain all-reduce of the gradient bytes + one memcpy pass over parameters, gradients and state), and against the floor plus the busiest rank's Newton-Schulz"
printf '%-7s %-5s | %10s %10s %10s %10s %6s | %10s %6s\n' model ranks step_us allred_us pass_us floor_us ratio ns_us ratio
for model in demo mlp256; do
  [[ " $parts " == *" model "* ]] || break
  for ranks in $ranks_list; do
    line=$(OPENBLAS_NUM_THREADS=1 mpirun --oversubscribe -np "$ranks" "$exe" --mode model --model "$model" \
             --iters "${ITERS:-200}" | grep '^model')
    get() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    printf '%-7s %-5s | %10s %10s %10s %10s %6s | %10s %6s\n' "$model" "$ranks" "$(get step_us)" "$(get allreduce_us)" \
      "$(get pass_us)" "$(get floor_us)" "$(get step_over_floor)" "$(get ns_us)" "$(get step_over_floor_ns)"
  done
done
