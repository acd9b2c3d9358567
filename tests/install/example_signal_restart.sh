#!/usr/bin/env bash
# An example program, stopped by SIGUSR1 (what SLURM sends before the time
# limit), checkpoints and exits 75 (EX_TEMPFAIL: run me again); rerun, it
# restores, finishes and exits 0; its last logged loss equals, digit for
# digit, that of a run never interrupted.
#   example_signal_restart.sh EXE CONFIG WORK_DIR MPIEXEC
set -euo pipefail
exe=$1 config=$2 work=$3 mpiexec=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work"
common=(--config="$config" --steps=300 --log_every=20 --checkpoint_every=0 --backend=cpu)

"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=0 --loss_csv=whole.csv --checkpoint_dir=ck_whole >whole.out

"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=1 --loss_csv=parts.csv --checkpoint_dir=ck_parts >first.out &
pid=$!
for _ in $(seq 600); do
  grep -q '^40,' parts.csv 2>/dev/null && break
  sleep 0.05
done
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 75 ] || { echo "the run stopped by SIGUSR1 exited $rc, expected 75:"; cat first.out; exit 1; }
grep -q "checkpoint requested by a signal" first.out || { echo "the run did not checkpoint on SIGUSR1:"; cat first.out; exit 1; }
"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=1 --loss_csv=parts.csv --checkpoint_dir=ck_parts >second.out
grep "restored" second.out || { echo "the rerun did not restore:"; cat second.out; exit 1; }

whole=$(tail -n 1 whole.csv | cut -d, -f1,2)
parts=$(tail -n 1 parts.csv | cut -d, -f1,2)
echo "uninterrupted: $whole   interrupted and restored: $parts"
[ "$whole" = "$parts" ] && [ "${whole%%,*}" = 300 ]
