#!/usr/bin/env bash
# Adam step bandwidth beside a plain copy, measured in the same run, as a table.
# Usage: bench/run_adam_bench.sh [build-dir] [params]   (defaults: build, 50M)
set -euo pipefail
build=${1:-build}
params=${2:-50M}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
printf '%-6s %-6s %-6s %12s %12s %12s %8s\n' ranks dtype params adam_ms adam_GB/s copy_GB/s ratio
for ranks in 1 2; do
  for dtype in fp32 bf16; do
    line=$(mpirun --oversubscribe -np "$ranks" "$build/bench/bench_adam" --params "$params" --dtype "$dtype" \
             --tensors 300 --iters 10 | grep adam_step_ms)
    get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    printf '%-6s %-6s %-6s %12s %12s %12s %8s\n' "$ranks" "$dtype" "$params" "$(get adam_step_ms)" \
      "$(get adam_GBps)" "$(get copy_GBps)" "$(get ratio)"
  done
done
