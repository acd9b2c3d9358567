#!/usr/bin/env bash
# The slurm test: jobscripts/cpu_job.sh on a real single-node Slurm.
#
#   tests/slurm/test_requeue.sh SOURCE_DIR PROGRAM
#
# 1. installs slurm-wlm and munge if missing, starts munged, slurmctld and
#    slurmd from a configuration under a scratch directory (cluster.sh);
# 2. submits the CPU job script twice with the same arguments:
#    "ref" runs uninterrupted; "sig" gets the checkpoint signal mid-run
#    (scancel --signal=USR1 --batch: what Slurm's --signal=B:USR1@N does at the
#    wall time), so it must checkpoint, requeue itself, restore and finish;
# 3. checks, from the job's output, scontrol and the checkpoint files, that
#    "sig" checkpointed on the signal, was requeued (Restarts=1,
#    SLURM_RESTART_COUNT=1), restored that very checkpoint, finished, and
#    ended with the same parameters and optimizer state as "ref", bit for bit.
# Every wait is bounded; the daemons are stopped on every exit path.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCE_DIR PROGRAM" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
program=$2
here=$(cd "$(dirname "$0")" && pwd)

# The run: long enough (about 7 s at 2 ranks on 2 idle cores, the examples run
# about 1500 steps/s; a minute under load) to signal it in the
# middle with room to spare on a fast machine, a periodic checkpoint before the
# signal and some after it.
steps=10000
checkpoint_every=2500
signal_after_step=3000  # signal once the log shows this step (past the first periodic checkpoint)
program_args=("--steps=$steps" "--checkpoint_every=$checkpoint_every" --log_every=10 --seed=3)

# shellcheck source=tests/slurm/test_lib.sh
source "$here/test_lib.sh"

[ -x "$program" ] || fail "program $program is not built"
for tool in timeout h5dump h5ls cmp; do
  command -v "$tool" >/dev/null || fail "$tool not found"
done

slurm_test_setup 0
# What the job script takes from the environment (sbatch passes it on).
export DMUON_PROGRAM=$program
export DMUON_CONFIG=$src/examples/surrogate.cfg
export DMUON_JOBSCRIPTS=$src/jobscripts
job_script=$src/jobscripts/cpu_job.sh

# The highest "step N" progress line the program has printed so far.
last_step() {
  sed -n 's/^step *\([0-9][0-9]*\) .*/\1/p' "$1" 2>/dev/null | tail -n 1
}
reached_step() {
  local s
  s=$(last_step "$1")
  [ -n "$s" ] && [ "$s" -ge "$2" ]
}

# ---------------------------------------------------------------- reference run
note "job ref: uninterrupted"
ref=$(submit ref "$job_script" -- "${program_args[@]}")
ref_out=$scratch/ref-$ref.out
wait_job_end "$ref" "$ref_out" 240
expect_state "$ref" "$ref_out" COMPLETED 0
expect_line "$ref" "$ref_out" '\] FINISHED$' "job ref"
expect_line "$ref" "$ref_out" "^step +$steps " "job ref"

# ---------------------------------------------------------------- signalled run
note "job sig: checkpoint signal once past step $signal_after_step"
sig=$(submit sig "$job_script" -- "${program_args[@]}")
sig_out=$scratch/sig-$sig.out
if ! slurm_wait_for 180 reached_step "$sig_out" "$signal_after_step"; then
  show_job "$sig" "$sig_out"
  fail "job sig did not reach step $signal_after_step within 180 s"
fi
timeout 10 scancel --signal=USR1 --batch "$sig" || fail "scancel --signal=USR1 --batch $sig failed"
note "signal sent at step $(last_step "$sig_out")"
wait_job_end "$sig" "$sig_out" 300
echo "---- job sig output"
cat "$sig_out"
echo "----"

expect_state "$sig" "$sig_out" COMPLETED 1

# The batch script saw and forwarded the signal, the program checkpointed on it
# and the script requeued the job.
expect_line "$sig" "$sig_out" 'restart 0\] checkpoint signal received: forwarding SIGUSR1' "first run"
expect_line "$sig" "$sig_out" '^checkpoint requested by a signal' "first run"
expect_line "$sig" "$sig_out" 'restart 0\] program checkpointed and asked to be run again \(status 75\)' "first run"
expect_line "$sig" "$sig_out" 'restart 0\] REQUEUE' "first run"
# The step of the checkpoint written on the signal: the last "checkpoint at
# step" line before the program's "requested by a signal" line.
on_signal=$(sed -n '/^checkpoint requested by a signal/q;s/^checkpoint at step \([0-9][0-9]*\) .*/\1/p' "$sig_out" | tail -n 1)
[ -n "$on_signal" ] || fail "no checkpoint written on the signal"
[ "$on_signal" -lt "$steps" ] || fail "the checkpoint on the signal is at step $on_signal, the end: nothing was left to restart"
note "checkpoint on the signal at step $on_signal"
# The second run: SLURM_RESTART_COUNT=1, restored exactly that checkpoint, finished.
expect_line "$sig" "$sig_out" 'restart 1\] start: SLURM_RESTART_COUNT=1 ' "second run"
expect_line "$sig" "$sig_out" "^restored .* at step $on_signal\$" "second run (restore of the checkpoint written on the signal)"
expect_line "$sig" "$sig_out" 'restart 1\] FINISHED$' "second run"
[ "$(grep -c '\] start: ' "$sig_out")" -eq 2 ] || fail "job sig ran $(grep -c '\] start: ' "$sig_out") times, expected 2"

# ---------------------------------------------------------------- same result
# The final checkpoints of both jobs: every dataset of parameters and optimizer
# state (/muon/..., /adam/...) byte for byte.
ref_ckpt=$scratch/runs/ref-$ref/checkpoints/ckpt_$steps.h5
sig_ckpt=$scratch/runs/sig-$sig/checkpoints/ckpt_$steps.h5
[ -f "$ref_ckpt" ] || fail "no final checkpoint $ref_ckpt"
[ -f "$sig_ckpt" ] || fail "no final checkpoint $sig_ckpt"
mapfile -t datasets < <(timeout 30 h5ls -r "$ref_ckpt" | awk '$2 == "Dataset" && $1 ~ /^\/(muon|adam)\// {print $1}')
printf '%s\n' "${datasets[@]}" | grep -q '^/muon/fp32/param$' || fail "no /muon/fp32/param in $ref_ckpt"
printf '%s\n' "${datasets[@]}" | grep -q '^/adam/fp32/param$' || fail "no /adam/fp32/param in $ref_ckpt"
for d in "${datasets[@]}"; do
  name=${d//\//_}
  timeout 30 h5dump -d "$d" -b LE -o "$scratch/ref$name.bin" "$ref_ckpt" >/dev/null || fail "h5dump $d of $ref_ckpt"
  timeout 30 h5dump -d "$d" -b LE -o "$scratch/sig$name.bin" "$sig_ckpt" >/dev/null || fail "h5dump $d of $sig_ckpt"
  [ -s "$scratch/ref$name.bin" ] || fail "$d is empty"
  cmp "$scratch/ref$name.bin" "$scratch/sig$name.bin" || fail "$d differs between the uninterrupted and the requeued run"
  echo "same: $d ($(stat -c %s "$scratch/ref$name.bin") bytes)"
done
# The equality means something only if training moves the parameters: the
# reference's Muon matrices one checkpoint before the end must differ from
# those at the end.
ref_mid=$scratch/runs/ref-$ref/checkpoints/ckpt_$((steps - checkpoint_every)).h5
[ -f "$ref_mid" ] || fail "no checkpoint $ref_mid"
timeout 30 h5dump -d /muon/fp32/param -b LE -o "$scratch/ref_mid.bin" "$ref_mid" >/dev/null || fail "h5dump of $ref_mid"
if cmp -s "$scratch/ref_mid.bin" "$scratch/ref_muon_fp32_param.bin"; then
  fail "/muon/fp32/param did not change between steps $((steps - checkpoint_every)) and $steps: the comparison proves nothing"
fi
note "PASS: checkpointed at step $on_signal on the signal, requeued (Restarts=1), restored, finished with the same ${#datasets[@]} datasets as the uninterrupted run"
