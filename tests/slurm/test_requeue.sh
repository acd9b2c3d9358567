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

# The run: long enough (about 15-30 s at 2 ranks on 2 cores) to signal it in
# the middle, a periodic checkpoint before the signal and two after it.
steps=600
checkpoint_every=200
signal_after_step=250   # signal once the log shows this step (past the first periodic checkpoint)
program_args=("--steps=$steps" "--checkpoint_every=$checkpoint_every" --log_every=10 --seed=3)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
note() { echo "== $*"; }

[ -x "$program" ] || fail "program $program is not built"
for tool in timeout h5dump h5ls cmp; do
  command -v "$tool" >/dev/null || fail "$tool not found"
done

note "installing Slurm and munge when missing"
"$here/install_slurm.sh" || fail "could not install slurm-wlm and munge"

scratch=$(mktemp -d /tmp/dmuon-slurm-test.XXXXXX)
# shellcheck source=tests/slurm/cluster.sh
source "$here/cluster.sh"
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  note "stopping Slurm and munge"
  slurm_cluster_stop "$scratch"
  if [ "$status" -eq 0 ] && [ -z "${DMUON_KEEP_SLURM_SCRATCH:-}" ]; then
    rm -rf "$scratch"
  else
    echo "scratch directory kept: $scratch"
  fi
  exit "$status"
}
trap cleanup EXIT
# A TERM from ctest (or ^C) still stops the daemons.
trap 'exit 143' TERM
trap 'exit 130' INT

note "starting a single-node Slurm under $scratch"
slurm_cluster_start "$scratch" || fail "Slurm did not start (logs above)"
timeout 10 sinfo

# What the job script takes from the environment (sbatch passes it on).
export DMUON_PROGRAM=$program
export DMUON_CONFIG=$src/examples/surrogate.cfg
export DMUON_JOBSCRIPTS=$src/jobscripts
# Open MPI as root, and no cross-memory attach in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
cd "$scratch"

submit() {
  local name=$1 id
  id=$(timeout 30 sbatch --parsable --job-name="$name" "$src/jobscripts/cpu_job.sh" "${program_args[@]}") ||
    fail "sbatch of $name failed"
  echo "${id%%;*}"
}

job_field() {  # job_field ID FIELD: one field of `scontrol show job`
  timeout 10 scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

job_ended() {
  case "$(job_field "$1" JobState)" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;;
    *) return 1 ;;
  esac
}

show_job() {  # what a failure needs to be understood
  local id=$1 out=$2
  echo "---- scontrol show job $id" >&2
  timeout 10 scontrol show job "$id" >&2 || true
  echo "---- $out" >&2
  cat "$out" >&2 2>/dev/null || true
  echo "---- slurmctld.log (tail)" >&2
  tail -n 20 "$scratch/log/slurmctld.log" >&2 2>/dev/null || true
}

wait_job_end() {  # wait_job_end ID OUTPUT SECONDS
  if ! slurm_wait_for "$3" job_ended "$1"; then
    show_job "$1" "$2"
    fail "job $1 did not end within $3 s"
  fi
}

# The highest "step N" progress line the program has printed so far.
last_step() {
  sed -n 's/^step *\([0-9][0-9]*\) .*/\1/p' "$1" 2>/dev/null | tail -n 1
}
reached_step() {
  local s
  s=$(last_step "$1")
  [ -n "$s" ] && [ "$s" -ge "$2" ]
}

expect_line() {  # expect_line OUTPUT REGEX WHAT
  grep -Eq "$2" "$1" || { show_job "${4:-}" "$1"; fail "$3: no line matching '$2' in $1"; }
}

# ---------------------------------------------------------------- reference run
note "job ref: uninterrupted"
ref=$(submit ref)
ref_out=$scratch/ref-$ref.out
wait_job_end "$ref" "$ref_out" 240
[ "$(job_field "$ref" JobState)" = COMPLETED ] || { show_job "$ref" "$ref_out"; fail "job ref did not complete"; }
[ "$(job_field "$ref" Restarts)" = 0 ] || { show_job "$ref" "$ref_out"; fail "job ref was restarted"; }
expect_line "$ref_out" '\] FINISHED$' "job ref" "$ref"
expect_line "$ref_out" "^step +$steps " "job ref" "$ref"

# ---------------------------------------------------------------- signalled run
note "job sig: checkpoint signal once past step $signal_after_step"
sig=$(submit sig)
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

state=$(job_field "$sig" JobState)
restarts=$(job_field "$sig" Restarts)
exit_code=$(job_field "$sig" ExitCode)
note "job sig: JobState=$state Restarts=$restarts ExitCode=$exit_code"
[ "$state" = COMPLETED ] || fail "job sig ended $state, not COMPLETED"
[ "$restarts" = 1 ] || fail "job sig: Restarts=$restarts, expected 1"
[ "$exit_code" = 0:0 ] || fail "job sig: ExitCode=$exit_code"

# The batch script saw and forwarded the signal, the program checkpointed on it
# and the script requeued the job.
expect_line "$sig_out" 'restart 0\] checkpoint signal received: forwarding SIGUSR1' "first run"
expect_line "$sig_out" '^checkpoint requested by a signal' "first run"
expect_line "$sig_out" 'restart 0\] REQUEUE' "first run"
# The step of the checkpoint written on the signal: the last "checkpoint at
# step" line before the program's "requested by a signal" line.
on_signal=$(sed -n '/^checkpoint requested by a signal/q;s/^checkpoint at step \([0-9][0-9]*\) .*/\1/p' "$sig_out" | tail -n 1)
[ -n "$on_signal" ] || fail "no checkpoint written on the signal"
[ "$on_signal" -lt "$steps" ] || fail "the checkpoint on the signal is at step $on_signal, the end: nothing was left to restart"
note "checkpoint on the signal at step $on_signal"
# The second run: SLURM_RESTART_COUNT=1, restored exactly that checkpoint, finished.
expect_line "$sig_out" 'restart 1\] start: SLURM_RESTART_COUNT=1 ' "second run"
expect_line "$sig_out" "^restored .* at step $on_signal\$" "second run (restore of the checkpoint written on the signal)"
expect_line "$sig_out" 'restart 1\] FINISHED$' "second run"
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
# reference's Muon matrices at step 400 must differ from those at the end.
ref_mid=$scratch/runs/ref-$ref/checkpoints/ckpt_400.h5
[ -f "$ref_mid" ] || fail "no checkpoint $ref_mid"
timeout 30 h5dump -d /muon/fp32/param -b LE -o "$scratch/ref_mid.bin" "$ref_mid" >/dev/null || fail "h5dump of $ref_mid"
if cmp -s "$scratch/ref_mid.bin" "$scratch/ref_muon_fp32_param.bin"; then
  fail "/muon/fp32/param did not change between steps 400 and $steps: the comparison proves nothing"
fi
note "PASS: checkpointed at step $on_signal on the signal, requeued (Restarts=1), restored, finished with the same ${#datasets[@]} datasets as the uninterrupted run"
