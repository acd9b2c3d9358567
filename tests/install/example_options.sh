#!/usr/bin/env bash
# An example program's command line on 2 ranks: --help exits 0 and shows the
# config file's values, once; each bad value exits 2 on every rank with one
# message naming the option and its value (no Fortran ERROR STOP, no
# backtrace, no training); a run whose last step is not a multiple of
# checkpoint_every still checkpoints its last step, and a longer run
# continues from it.
#   example_options.sh EXE CONFIG WORK_DIR MPIEXEC
set -euo pipefail
exe=$1 config=$2 work=$3 mpiexec=$4
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAILED: $*"; exit 1; }

"$mpiexec" -n 2 "$exe" --config="$config" --help >help.out 2>&1 || fail "--help exited $?: $(cat help.out)"
[ "$(grep -c -- '--steps=1500 ' help.out)" = 1 ] || fail "--help shows the default --steps=1500 once: $(cat help.out)"
grep -q -- '--help' help.out || fail "--help does not describe itself"
# -h too, and with a config file given the other way (--config FILE)
"$mpiexec" -n 2 "$exe" -h --config "$config" >h.out 2>&1 || fail "-h exited $?: $(cat h.out)"
cmp -s help.out h.out || fail "-h differs from --help"

# bad value | a string the one message must hold
cases=(
  "--steps=-5|--steps=-5"
  "--hidden=0|--hidden=0"
  "--optimizer=sgd|--optimizer=sgd"
  "--lr_final=2|--lr_final=2"
  "--layers=99|--layers=99"
  "--restart=7|--restart=7"
  "--muon_lr=0|--muon_lr=0"
  "--steps=abc|abc"
  "--no_such_key=1|no_such_key"
  "--backend=bogus|--backend=bogus"
  "--nx=3|--nx=3"
)
for case in "${cases[@]}"; do
  bad=${case%%|*} want=${case#*|}
  rc=0
  "$mpiexec" -n 2 "$exe" --config="$config" --checkpoint_dir=ck_bad "$bad" >bad.out 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "$bad: exit status $rc, expected 2: $(cat bad.out)"
  # Only the program's own lines (mpiexec adds its notice of the failure).
  grep "^burgers_surrogate" bad.out >messages.txt || true
  [ "$(wc -l <messages.txt)" = 1 ] || fail "$bad: expected one message, got: $(cat bad.out)"
  grep -qF -- "$want" messages.txt || fail "$bad: the message does not name '$want': $(cat messages.txt)"
  if grep -qiE 'error stop|backtrace|^step ' bad.out; then fail "$bad: $(cat bad.out)"; fi
  echo "$bad -> $(cat messages.txt)"
done

# The last step is checkpointed (30 is no multiple of 20), and a longer run
# continues from it.
common=(--config="$config" --backend=cpu --log_every=10 --checkpoint_every=20 --checkpoint_dir=ck)
"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=0 --steps=30 --loss_csv=first.csv >first.out 2>&1 ||
  fail "the 30-step run: $(cat first.out)"
grep -q "checkpoint at step 30 in ck" first.out || fail "no checkpoint at the last step: $(cat first.out)"
"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=1 --steps=40 --loss_csv=second.csv >second.out 2>&1 ||
  fail "the longer run: $(cat second.out)"
grep -q "restored ck at step 30" second.out || fail "the longer run did not start at step 30: $(cat second.out)"
# A fresh start (--restart=0) into a directory of checkpoints is refused at
# once: its saves would fail (dmuon never overwrites a checkpoint).
rc=0
"$mpiexec" -n 2 "$exe" "${common[@]}" --restart=0 --steps=40 --loss_csv=third.csv >third.out 2>&1 || rc=$?
if [ "$rc" != 2 ] || [ "$(grep -c -- "--checkpoint_dir=ck holds" third.out)" != 1 ]; then
  fail "--restart=0 into a directory of checkpoints: exit $rc: $(cat third.out)"
fi
echo "example options test passed"
