#!/usr/bin/env bash
# The job scripts' other paths on a real single-node Slurm:
#
#   tests/slurm/test_kill_chain.sh SOURCE_DIR PROGRAM
#
# 1. kill-on-bad-exit: jobscripts/cpu_job.sh with a program one rank of which
#    fails at once while the other waits (bad_rank.sh): srun ends the waiting
#    rank, the job fails within seconds with the failing rank's status, not at
#    the wall time;
# 2. a singleton chain (jobscripts/submit_chain.sh, 3 jobs) with PROGRAM (an
#    example): the first job gets the checkpoint signal, checkpoints and ends
#    without requeueing itself; the second restores that checkpoint and
#    finishes; the third finds the run finished and ends at once;
# 3. an array chain (--array=1-2%1): the first task finishes the run, the
#    second ends at once.
# Every wait is bounded; the daemons are stopped on every exit path.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCE_DIR PROGRAM" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
program=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/slurm/test_lib.sh
source "$here/test_lib.sh"
[ -x "$program" ] || fail "program $program is not built"

slurm_test_setup 0
export DMUON_CONFIG=$src/examples/surrogate.cfg
export DMUON_JOBSCRIPTS=$src/jobscripts
cpu_job=$src/jobscripts/cpu_job.sh

# ---------------------------------------------------------------- kill-on-bad-exit
note "job bad: one rank fails at once, the other waits 600 s"
started=$SECONDS
export DMUON_PROGRAM=$here/bad_rank.sh
bad=$(submit bad "$cpu_job" --)
bad_out=$scratch/bad-$bad.out
wait_job_end "$bad" "$bad_out" 120
cat "$bad_out"
note "job bad ended after $((SECONDS - started)) s"
[ "$(job_field "$bad" JobState)" = FAILED ] || { show_job "$bad" "$bad_out"; fail "job bad did not end FAILED"; }
expect_line "$bad" "$bad_out" 'FAILED: program exited with status [1-9]' "job bad"
expect_line "$bad" "$bad_out" '^rank 1: failing' "job bad"
if grep -q 'never ended by srun' "$bad_out"; then fail "the waiting rank was not ended"; fi

# ---------------------------------------------------------------- singleton chain
# Long enough to signal in the middle, short enough for a loaded machine
# (the examples run 1500 steps/s on 2 idle cores, 15 under heavy load).
steps=1500
signal_after_step=600
program_args=("--steps=$steps" --checkpoint_every=500 --log_every=10 --seed=3)
note "singleton chain of 3 jobs: the checkpoint signal to the first"
export DMUON_PROGRAM=$program
DMUON_CHAIN_NAME=chain "$src/jobscripts/submit_chain.sh" 3 "$cpu_job" "${program_args[@]}" \
  >submitted.txt || fail "submit_chain.sh failed"
cat submitted.txt
mapfile -t ids < <(sed -n 's/^submitted job \([0-9]*\) .*/\1/p' submitted.txt)
[ "${#ids[@]}" = 3 ] || fail "expected 3 jobs submitted"
outs=("$scratch/chain-${ids[0]}.out" "$scratch/chain-${ids[1]}.out" "$scratch/chain-${ids[2]}.out")
last_step() { sed -n 's/^step *\([0-9][0-9]*\) .*/\1/p' "$1" 2>/dev/null | tail -n 1; }
reached_step() { local s; s=$(last_step "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ]; }
if ! slurm_wait_for 180 reached_step "${outs[0]}" "$signal_after_step"; then
  show_job "${ids[0]}" "${outs[0]}"
  fail "the first job of the chain did not reach step $signal_after_step within 180 s"
fi
timeout 10 scancel --signal=USR1 --batch "${ids[0]}" || fail "scancel --signal=USR1 --batch ${ids[0]} failed"
for i in 0 1 2; do wait_job_end "${ids[$i]}" "${outs[$i]}" 300; done
for i in 0 1 2; do echo "---- job $((i + 1)) of the chain"; cat "${outs[$i]}"; done
for i in 0 1 2; do expect_state "${ids[$i]}" "${outs[$i]}" COMPLETED 0; done
expect_line "${ids[0]}" "${outs[0]}" '^checkpoint requested by a signal' "first job"
expect_line "${ids[0]}" "${outs[0]}" 'CHAIN: the next job of the chain continues' "first job"
if grep -q 'REQUEUE' "${outs[0]}"; then fail "the first job requeued itself in chain mode"; fi
on_signal=$(sed -n '/^checkpoint requested by a signal/q;s/^checkpoint at step \([0-9][0-9]*\) .*/\1/p' "${outs[0]}" | tail -n 1)
if [ -z "$on_signal" ] || [ "$on_signal" -ge "$steps" ]; then fail "no checkpoint before the end on the signal"; fi
expect_line "${ids[1]}" "${outs[1]}" "^restored .* at step $on_signal\$" "second job (restore of the first job's checkpoint)"
expect_line "${ids[1]}" "${outs[1]}" "^step +$steps " "second job"
expect_line "${ids[1]}" "${outs[1]}" '\] FINISHED$' "second job"
expect_line "${ids[2]}" "${outs[2]}" 'FINISHED already' "third job"
if grep -q 'job step:' "${outs[2]}"; then fail "the third job ran a job step after the run had finished"; fi
[ -f "$scratch/runs/chain/checkpoints/ckpt_$steps.h5" ] || fail "no final checkpoint in runs/chain"

# ---------------------------------------------------------------- array chain
note "array chain of 2 tasks (%1): the first finishes, the second ends at once"
DMUON_CHAIN_MODE=array DMUON_CHAIN_NAME=arr "$src/jobscripts/submit_chain.sh" 2 "$cpu_job" \
  --steps=200 --log_every=50 >array.txt || fail "submit_chain.sh (array) failed"
array=$(sed -n 's/^submitted job \([0-9]*\) .*/\1/p' array.txt)
[ -n "$array" ] || fail "no array job submitted: $(cat array.txt)"
for task in 1 2; do wait_job_end "${array}_$task" "$scratch/arr-${array}_$task.out" 240; done
# %x-%j names each task's output by its own job id: find them by content.
first=$(grep -l '\] FINISHED$' "$scratch"/arr-*.out || true)
second=$(grep -l 'FINISHED already' "$scratch"/arr-*.out || true)
cat "$scratch"/arr-*.out
if [ -z "$first" ] || [ -z "$second" ] || [ "$first" = "$second" ]; then
  fail "array chain: expected one task to finish and one to find it finished"
fi
[ -f "$scratch/runs/arr-$array/checkpoints/ckpt_200.h5" ] || fail "no final checkpoint in runs/arr-$array"
note "PASS: kill-on-bad-exit ended the waiting rank; the singleton chain continued from the checkpoint on the signal and stopped after the run finished; so did the array chain"
