#!/usr/bin/env bash
# Fuzzes checkpoint restore (libFuzzer, clang + ASan + UBSan): builds fuzz/
# into build-fuzz, writes the seed corpus (valid checkpoints made by dmuon),
# then runs fuzz_restore for a bounded time. Fails on any crash, leak, hang
# (-timeout per input), UB, or a malformed file that is not refused cleanly
# (see fuzz/fuzz_restore.cpp).
#   scripts/fuzz.sh [seconds, default 60] [extra libFuzzer flags]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:-60}
shift || true
build=$root/build-fuzz

# The newest clang installed: hdf5_io captures structured bindings in lambdas
# (C++20, a GCC extension in C++17), which clang accepts from version 16 on.
cxx=${DMUON_FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++-18 clang++-17 clang++-16 clang++; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ] || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' |
     "$cxx" -x c++ -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
  echo "fuzz.sh: needs clang with libFuzzer (Debian 12: apt-get install clang-16 libclang-rt-16-dev)" >&2
  exit 1
fi
cc=${cxx/clang++/clang}
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j "${DMUON_JOBS:-2}" --target fuzz_restore make_seed_corpus

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# tests/sanitizers/lsan.supp: MPI's memory (the target keeps MPI_Init's out
# itself). No check at exit: MPI_Init's memory again. No ASan suppressions and
# no allocator_may_return_null any more: damaged bytes are refused by the
# checkpoint seal before HDF5 parses them, and the structured mode's files are
# written by HDF5 itself (fuzz/README.md), so HDF5's own memory errors on
# damaged files are no longer reached.
export ASAN_OPTIONS="detect_leaks=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0:leak_check_at_exit=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

work=$build/run
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts" "$work/tmp"
"$build/make_seed_corpus" "$work/seeds" "$work/corpus"
# Files that once found something (HDF5 issues, see fuzz/README.md) stay in the
# corpus: unsealed, they must now be refused by the seal.
cp fuzz/regressions/* "$work/corpus/"

# One process, single-rank MPI (no mpirun): a restore is collective but all
# of its validation is per rank. -timeout: an input that takes longer is a hang.
# A fixed seed (the seed corpus is byte-reproducible too) makes a run
# reproducible up to the time limit: a shorter run executes a prefix of a
# longer one's inputs. DMUON_FUZZ_SEED=0 picks a random seed;
# DMUON_FUZZ_RUNS caps the number of inputs (-1: the time limit alone).
export DMUON_FUZZ_TMP=$work/tmp
"$build/fuzz_restore" -seed="${DMUON_FUZZ_SEED:-1}" -runs="${DMUON_FUZZ_RUNS:--1}" \
  -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$@" "$work/corpus"
echo "fuzz.sh: no finding in ${seconds} s"
