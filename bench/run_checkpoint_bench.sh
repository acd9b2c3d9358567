#!/usr/bin/env bash
# Checkpoint save/restore bandwidth beside raw POSIX write+fsync/read of the
# same bytes in the same directory, measured in the same run, as a table.
# Usage: bench/run_checkpoint_bench.sh [build-dir] [dir] [sizes-MB...]
#   defaults: build, ./bench_ckpt_dir, 256 1024
# Environment: RANKS (default "1 2 4"), REPS (default 3; the best is reported).
set -euo pipefail
build=${1:-build}
dir=${2:-bench_ckpt_dir}
shift $(( $# > 2 ? 2 : $# ))
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(256 1024)
read -r -a rank_list <<<"${RANKS:-1 2 4}"
reps=${REPS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
printf '%-6s %-8s %10s %10s %7s %10s %11s %7s\n' ranks MB raw_w_MB/s save_MB/s ratio raw_r_MB/s restore_MB/s ratio
for size in "${sizes[@]}"; do
  for ranks in "${rank_list[@]}"; do
    line=$(mpirun --oversubscribe -np "$ranks" "$build/bench/bench_checkpoint" --dir "$dir" --size-mb "$size" --reps "$reps" |
           grep payload_MB)
    get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    printf '%-6s %-8s %10s %10s %7s %10s %11s %7s\n' "$ranks" "$(get payload_MB)" "$(get raw_write_MBps)" \
      "$(get save_MBps)" "$(get save_ratio)" "$(get raw_read_MBps)" "$(get restore_MBps)" "$(get restore_ratio)"
  done
done
