#!/bin/bash
# On a GPU machine, after scripts/gpu_check.sh (or alone): the small-step
# benchmarks (the small models and Adam over 1000 tiny tensors, dmuon and
# torch; the device cost of a dependent graph node), then
# bench/cuda/perf_table.py's table over their results and, when given,
# gpu_check.sh's results.txt (for the Gram Newton-Schulz rows of bench_cuda_ns).
#
#   bench/cuda/run_perf_benches.sh [BIN_DIR] [LOG_DIR] [GPU_CHECK_RESULTS]
#
# BIN_DIR as for gpu_check.sh (.carry/build); LOG_DIR (default $OUT/perf or
# /tmp/dmuon_perf) receives one log per program and perf_results.txt.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-.carry/build}
logs=${2:-${OUT:-/tmp}/perf}
more=${3:-}
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export DMUON_CACHE_DIR=$logs/ns_cache
results=$logs/perf_results.txt
: > "$results"
exe=$bin/bench/bench_cuda_small
[ -x "$exe" ] || exe=$bin/bench_cuda_small
run() {  # name, command...
  local name=$1; shift
  timeout 240 "$@" > "$logs/$name.log" 2>&1 || echo "benchmark $name failed (rc $?): $(tail -3 "$logs/$name.log")"
  grep -E '^(RESULT|NOTE)' "$logs/$name.log" | tee -a "$results"
}
run bench_cuda_small "$exe"
run bench_torch_small python3 "$here/bench/cuda/bench_torch_small.py"
run bench_cuda_graph_chain "${exe%bench_cuda_small}bench_cuda_graph_chain"
echo
python3 "$here/bench/cuda/perf_table.py" "$results" ${more:+"$more"}
