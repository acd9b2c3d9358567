#!/bin/bash
# On a GPU machine: run every gpu-labelled test and every CUDA benchmark (with
# the PyTorch comparisons) in one go, and print the benchmark table last.
#
#   scripts/gpu_check.sh [BIN_DIR] [LOG_DIR]
#
# BIN_DIR is the folder scripts/make_gpu_carry.sh lays out (.carry/build):
# programs under tests/ and bench/, and gpu_tests.tsv. LOG_DIR (default $OUT
# or /tmp/dmuon_gpu_check) receives one log per program and results.txt.
# GPU_CHECK_PARTS (default "tests benches") runs only the parts named; with
# GPU_CHECK_TESTS (an extended regular expression) only the gpu tests whose
# names match it; GPU_CHECK_TIMEOUT (default 300) bounds each test in seconds.
# The tests matching GPU_CHECK_PDL2_TESTS (default: those that replay graphs)
# run a second time with DMUON_CUDA_PDL=2, logged as NAME_pdl2.
# Exit status: number of failed tests.
set -u
parts=${GPU_CHECK_PARTS:-tests benches}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-.carry/build}
logs=${2:-${OUT:-/tmp/dmuon_gpu_check}}
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Newton-Schulz product choices (timed at each shape's first step) go to a
# cache inside LOG_DIR: a fresh one per run, returned with the logs.
export DMUON_CACHE_DIR=$logs/ns_cache
rm -rf "$DMUON_CACHE_DIR"
results=$logs/results.txt
: > "$results"

find_bin() {
  for d in "$bin" "$bin/tests" "$bin/bench" "$bin/bin"; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
  echo "missing:$1"
}

echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$logs/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$logs/device.txt"

failed=0
run_test() {  # name, skip regex ("-": none), command...
  local name=$1 skip=$2; shift 2
  local t0
  t0=$(date +%s.%N)
  timeout "${GPU_CHECK_TIMEOUT:-300}" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  # As CTest does: a test that prints its skip expression was skipped.
  [ $rc -eq 0 ] && [ "$skip" != - ] && grep -qE "$skip" "$logs/$name.log" && rc=77
  local dt
  dt=$(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo "?")
  case $rc in
    0) echo "PASS  $name (${dt}s)";;
    77) echo "SKIP  $name";;
    *) echo "FAIL  $name (rc $rc, log $logs/$name.log)"; tail -25 "$logs/$name.log"; failed=$((failed + 1));;
  esac
  echo "TEST $name $rc" >> "$results"
}

echo "== gpu tests"
# Every gpu-labelled CTest test, from the manifest scripts/make_gpu_carry.sh
# writes (scripts/gpu_manifest.py): new tests need no edit here.
manifest=$bin/gpu_tests.tsv
[ -f "$manifest" ] || { echo "no $manifest: build it with scripts/make_gpu_carry.sh"; exit 1; }
DMUON_BIN=$(cd "$bin" && pwd)
export DMUON_BIN DMUON_ROOT=$here
if [[ " $parts " == *" tests "* ]]; then
  while IFS=$'\t' read -r name skip cmd; do
    [[ -n "${GPU_CHECK_TESTS:-}" && ! "$name" =~ ${GPU_CHECK_TESTS} ]] && continue
    run_test "$name" "$skip" bash -c "$cmd" < /dev/null
    # The tests that replay graphs again with programmatic edges into cuBLAS's
    # products too (DMUON_CUDA_PDL=2, not the default yet: docs/decisions.md).
    if [[ "$name" =~ ${GPU_CHECK_PDL2_TESTS:-step_graph|(muon|ns_gram|shape_lanes|training|master_weights)_np1} ]]; then
      DMUON_CUDA_PDL=2 run_test "${name}_pdl2" "$skip" bash -c "$cmd" < /dev/null
    fi
  done < "$manifest"
  for n in 1 2; do [ -f "$logs/test_cuda_vs_torch_np$n.log" ] && sed -n '/parameter/,$p' "$logs/test_cuda_vs_torch_np$n.log"; done
fi
[[ " $parts " == *" benches "* ]] || { python3 "$here/bench/cuda/gpu_table.py" "$results"; exit $failed; }

echo "== benchmarks"
bench() {  # name, command... (RESULT keys get $key_prefix in front)
  local name=$1; shift
  timeout 240 "$@" > "$logs/$name.log" 2>&1 || echo "benchmark $name failed (rc $?): $(tail -3 "$logs/$name.log")"
  grep -E '^(RESULT|CHOICE)' "$logs/$name.log" | sed "s/^RESULT /RESULT ${key_prefix:-}/" | tee -a "$results"
}
bench bench_cuda_adam "$(find_bin bench_cuda_adam)"
bench bench_torch_adam python3 "$here/bench/cuda/bench_torch_adam.py"
bench bench_cuda_ns "$(find_bin bench_cuda_ns)"
bench bench_torch_ns python3 "$here/bench/cuda/bench_torch_ns.py"
bench bench_cuda_ns12 "$(find_bin bench_cuda_ns)" --count 12 --iters 10
bench bench_torch_ns12 python3 "$here/bench/cuda/bench_torch_ns.py" 12
bench bench_cuda_step "$(find_bin bench_cuda_step)"
# cuBLASLt's plans for the ways a batch's products could take scalars and
# parameters (a table of its own, kept in its log; docs/decisions.md).
bench bench_cuda_lt_scalars "$(find_bin bench_cuda_lt_scalars)"
bench bench_torch_step python3 "$here/bench/cuda/bench_torch_step.py"
bench bench_cuda_small "$(find_bin bench_cuda_small)"
bench bench_torch_small python3 "$here/bench/cuda/bench_torch_small.py"
bench bench_cuda_graph_chain "$(find_bin bench_cuda_graph_chain)"
# Programmatic edges (docs/decisions.md): the small models and 768x3072 x1
# again with them off (DMUON_CUDA_PDL=0) and into cuBLAS's products too (2),
# to set beside the default rows above.
for p in 0 2; do
  export DMUON_CUDA_PDL=$p key_prefix=pdl${p}_
  bench "bench_cuda_small_pdl$p" "$(find_bin bench_cuda_small)"
  bench "bench_cuda_ns_pdl$p" "$(find_bin bench_cuda_ns)" --shape 768x3072
  unset DMUON_CUDA_PDL key_prefix
done
# The NCCL phases against plain NCCL, at 2 and 4 ranks (on one GPU through
# gpu_rank.sh: NCCL's socket transport; on several GPUs: their links).
for n in 2 4; do
  bench "bench_cuda_comm_np$n" mpiexec -n "$n" "$here/tests/gpu/gpu_rank.sh" "$(find_bin bench_cuda_comm)"
done

echo
python3 "$here/bench/cuda/gpu_table.py" "$results"
echo; python3 "$here/bench/cuda/perf_table.py" "$results"
exit $failed
