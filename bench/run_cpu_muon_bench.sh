#!/usr/bin/env bash
# CPU Muon: Newton-Schulz time per shape beside the sgemm rate of the same run
# (one rank), then the whole optimizer step of a fixed model at 1 and 2 ranks.
# Usage: bench/run_cpu_muon_bench.sh [build-dir]   (default: build)
#   REPEATS=n  timed repeats per NS measurement, best kept (default 7)
#   WIDTH=w LAYERS=l ITERS=i  the step model (defaults 512, 6, 10)
set -euo pipefail
build=${1:-build}
exe=$build/bench/bench_newton_schulz
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
width=${WIDTH:-512}
layers=${LAYERS:-6}
iters=${ITERS:-10}
echo "# $(date -u +%FT%TZ) $(uname -n), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg), BLAS $(ldd "$exe" | grep -o 'lib[a-z]*blas[^ ]*' | head -1)"
echo "# Newton-Schulz, 5 quintic iterations, fp32, one rank; GF/s counts 4k^2n+2k^3 per iteration (full GEMMs)"
echo "# (a) one BLAS thread, process CPU time: robust when other work shares the machine"
OPENBLAS_NUM_THREADS=1 mpirun -np 1 "$exe" --mode ns --clock cpu --repeats "${REPEATS:-7}"
echo "# (b) $cores BLAS threads, wall time"
OPENBLAS_NUM_THREADS=$cores mpirun -np 1 "$exe" --mode ns --clock wall --repeats "${REPEATS:-7}"
echo
echo "# dmuon_step: $layers Muon ${width}x$width + ${width}x$((4 * width)) + $((4 * width))x$width (fp32) with Adam biases, clipping on"
printf '%-6s %-8s %12s %10s %10s %12s\n' ranks threads muon_params step_ms min_ms ns_busiest_ms
for ranks in 1 2; do
  threads=$((cores / ranks))
  ((threads < 1)) && threads=1
  # One BLAS thread per core: ranks x threads never oversubscribes the cores.
  line=$(OPENBLAS_NUM_THREADS=$threads mpirun --oversubscribe -x OPENBLAS_NUM_THREADS -np "$ranks" "$exe" --mode step \
           --width "$width" --layers "$layers" --iters "$iters" | grep '^step')
  get() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  printf '%-6s %-8s %12s %10s %10s %12s\n' "$ranks" "$threads" "$(get muon_params)" "$(get step_ms)" "$(get min_ms)" \
    "$(get ns_busiest_rank_ms)"
done
