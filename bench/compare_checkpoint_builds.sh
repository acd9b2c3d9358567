#!/bin/bash
# Checkpoint save and restore of two builds side by side, in one run on one
# machine: the builds' bench_checkpoint runs alternate (A B, B A, ...) so a
# drift of the machine's load reaches both alike; the medians and the ratio
# new/old are printed per rank count.
#   bench/compare_checkpoint_builds.sh OLD_BUILD NEW_BUILD DIR [SIZE_MB] [ROUNDS]
# RANKS (default "1 2") and REPS (best-of per run, default 2) from the environment.
set -euo pipefail
old=$1 new=$2 dir=$3 size=${4:-256} rounds=${5:-5}
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
out=$(mktemp)
for np in ${RANKS:-1 2}; do
  for ((i = 0; i < rounds; i++)); do
    order=(old new)
    ((i % 2)) && order=(new old)
    for which in "${order[@]}"; do
      build=$old
      [ "$which" = new ] && build=$new
      line=$("${mpirun[@]}" -np "$np" "$build/bench/bench_checkpoint" --dir "$dir" --size-mb "$size" --reps "${REPS:-2}")
      echo "$which $line" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    which, rest = line.split(' ', 1)
    f = dict(kv.split('=') for kv in rest.split())
    for key in ('save_MBps', 'restore_MBps'):
        rows.setdefault((f['ranks'], key), {}).setdefault(which, []).append(float(f[key]))
for (ranks, key), v in sorted(rows.items()):
    o, n = statistics.median(v['old']), statistics.median(v['new'])
    print(f"ranks={ranks} {key}: old median {o:.0f}, new median {n:.0f}, new/old {n / o:.3f} "
          f"(old {sorted(v['old'])}, new {sorted(v['new'])})")
PY
rm -f "$out"
