#!/usr/bin/env bash
# A restore's read patterns against plain reads of the same file, side by
# side in one run, and what a restore does beside its reads (zeroing fresh
# memory, copies from the page cache): bench/bench_read_patterns.cpp says what
# each row is. Run it in the directory checkpoints go to.
# Usage: bench/run_read_patterns_bench.sh [build-dir] [dir] [size-MiB]
#   defaults: build, ./bench_read_patterns_dir, 1024; REPS (default 5).
set -euo pipefail
build=${1:-build}
dir=${2:-bench_read_patterns_dir}
size=${3:-1024}
mkdir -p "$dir"
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, kernel $(uname -r), $(df -h "$dir" | awk 'NR == 2 {print $1}')"
"$build/bench/bench_read_patterns" --file "$dir/read_patterns.bin" --size-mb "$size" --reps "${REPS:-5}"
