#!/usr/bin/env bash
# An example program restarts from a checkpoint whose Muon plan is not the one
# it makes itself (the same model saved by a program that registered it in
# another order): the restore re-plans dmuon's storage, which moves every
# parameter view. The restarted run must take its views after the restore: its
# logged losses then equal, digit for digit, those of the run that saved the
# checkpoint (views taken before the restore point to freed memory).
#   example_replanned_restart.sh EXE CONFIG WORK_DIR MPIEXEC CKPT_TOOL
set -euo pipefail
exe=$1 config=$2 work=$3 mpiexec=$4 ckpt_tool=$5
rm -rf "$work"
mkdir -p "$work"
cd "$work"
common=(--config="$config" --steps=300 --log_every=20 --backend=cpu)

"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=0 --checkpoint_every=100 --loss_csv=whole.csv \
  --checkpoint_dir=ck_whole >whole.out
# ck_moved: step 100 again, saved with the parameters registered in reverse
# order (the tool fails when that gives the same plan: nothing to test).
"$mpiexec" -n 2 "$ckpt_tool" reorder ck_whole/ckpt_100.h5 ck_moved >reorder.out ||
  { echo "ckpt_tool reorder failed:"; cat reorder.out; exit 1; }
status=0
"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=1 --checkpoint_every=0 --loss_csv=moved.csv \
  --checkpoint_dir=ck_moved >moved.out 2>&1 || status=$?
grep -q "restored ck_moved at step 100" moved.out || { echo "the restart did not restore ck_moved (exit $status):"; cat moved.out; exit 1; }
[ "$status" = 0 ] || { echo "the restarted run failed (exit $status):"; cat moved.out; exit 1; }

# every line after step 100: step,loss
awk -F, 'NR > 1 && $1 > 100 {print $1 "," $2}' whole.csv >expected.txt
cut -d, -f1,2 moved.csv >restarted.txt
echo "steps 120-300, uninterrupted / restarted from the re-planned checkpoint:"
paste -d' ' expected.txt restarted.txt
[ "$(wc -l <expected.txt)" = 10 ] && cmp -s expected.txt restarted.txt
