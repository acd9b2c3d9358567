#!/usr/bin/env bash
# Builds the CUDA programs here and lays out what a GPU machine needs to run
# them (scripts/gpu_check.sh, bench/run_checkpoint_bench.sh) in one folder:
#
#   scripts/make_gpu_carry.sh [BUILD_DIR] [CARRY_DIR]     defaults: build-gpu .carry
#
# CARRY_DIR/build/{tests,bench}/  stripped test and bench programs (same layout
#                                 as a build tree, so the scripts find them)
# CARRY_DIR/build/gpu_tests.tsv   the gpu-labelled CTest tests as commands
#                                 (scripts/gpu_manifest.py)
# CARRY_DIR/lib/                  the shared libraries the GPU machine lacks
#                                 (parallel HDF5 and its compressors, OpenBLAS,
#                                 Boost.Program_options, gfortran's runtime),
#                                 and dmuon's CUDA backend (libdmuon_cuda)
# CARRY_DIR/setup.sh              source it there: puts lib/ on LD_LIBRARY_PATH
#
# Why: the GPU machine has CUDA, NCCL, OpenMPI and PyTorch but no parallel HDF5
# and no compilers for Fortran (docs/benchmarks.md, "CUDA"). CUDA's own
# libraries are not carried: the machine's match the toolkit used here (13.0).
set -euo pipefail
build=${1:-build-gpu}
carry=${2:-.carry}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

# An existing CUDA build (for example the default preset's build/) is built as
# it is; anything else is configured for the H200 first.
if ! grep -q '^CMAKE_CUDA_FLAGS:' "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build" -DDMUON_ENABLE_CUDA=ON -DDMUON_ENABLE_FORTRAN=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
cmake --build "$build" -j"$(nproc)"

rm -rf "$carry"
mkdir -p "$carry/build/tests" "$carry/build/bench" "$carry/lib"
# The gpu-labelled tests, as CTest knows them (commands, environment), with
# their programs; then the CUDA benches and the checkpoint bench.
ctest --test-dir "$build" --show-only=json-v1 -L gpu |
  python3 scripts/gpu_manifest.py "$PWD/$build" "$PWD" > "$carry/build/gpu_tests.tsv"
ctest --test-dir "$build" --show-only=json-v1 -L gpu |
  python3 -c 'import json,sys; [print(w) for t in json.load(sys.stdin)["tests"] for w in t["command"]]' |
  grep "^$PWD/$build/" | sort -u | while read -r f; do
    if [ -x "$f" ] && [ ! -d "$f" ]; then install -s -m 755 "$f" "$carry/build/tests/"; fi
  done
# The tests' output folders (a multi-rank test writes its verdicts there).
(cd "$build" && find tests -mindepth 1 -maxdepth 3 -type d ! -path '*CMakeFiles*') |
  while read -r d; do mkdir -p "$carry/build/$d"; done
for f in "$build"/bench/bench_cuda_* "$build"/bench/bench_checkpoint "$build"/bench/bench_read_patterns; do
  if [ -x "$f" ]; then install -s -m 755 "$f" "$carry/build/bench/"; fi
done

# Libraries the binaries load from the system that the GPU machine lacks, and
# the CUDA backend's own (libdmuon_cuda: linked by the gpu tests, loaded by
# the others from LD_LIBRARY_PATH).
for f in "$carry"/build/*/*; do if [ -f "$f" ]; then ldd "$f"; fi; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -E 'libhdf5|libsz|libaec|libopenblas|libboost_program_options|libgfortran|libquadmath|libmpi_cxx|libdmuon_cuda' |
  while read -r lib; do cp -L "$lib" "$carry/lib/"; done

cat > "$carry/setup.sh" <<'EOF'
# Sourced on the GPU machine.
export LD_LIBRARY_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
# One compressed file travels to the GPU machine (the carry limit is 64 MiB);
# there: tar xJf out/gpu_carry.tar.xz
mkdir -p out
tar cJf out/gpu_carry.tar.xz "$carry"
du -sh "$carry" out/gpu_carry.tar.xz
ls "$carry"/build/tests "$carry"/build/bench "$carry"/lib
