# shellcheck shell=bash
# Shared part of dmuon's Slurm batch scripts (jobscripts/*_job.sh): logging,
# the checkpoint signal, the job step, and the requeue decision. Sourced, not
# run. The batch script calls, in order:
#
#   dmuon_job_begin                 log the start (SLURM_RESTART_COUNT), trap SIGUSR1
#   dmuon_job_enter_run_dir         cd into the run directory (same one after a requeue)
#   dmuon_job_run srun ... prog ... run the job step, forwarding SIGUSR1 to it
#   dmuon_job_finish                "finished", "requeue" or "failed"; exits
#
# The protocol with the program (the examples follow it):
# - Slurm sends SIGUSR1 to this batch shell some time before the wall time
#   (#SBATCH --signal=B:USR1@SECONDS). The trap forwards it to the job step;
#   every rank's dmuon_install_signal_handler(ctx, SIGUSR1) flag is raised and
#   dmuon_checkpoint_requested() makes the ranks agree on the step at which
#   they all checkpoint. The program then exits.
# - The program restarts from the latest checkpoint of its checkpoint
#   directory when there is one (the run directory is the same after a requeue,
#   the Slurm job id being kept).
# - Telling "finished" from "checkpointed, more to do", in this order:
#   exit status DMUON_REQUEUE_EXIT_CODE (75, EX_TEMPFAIL) means "checkpointed,
#   run me again"; a program that writes DMUON_DONE_FILE when it has done all
#   its steps is finished when that file exists; exit status 0 without a
#   checkpoint signal means finished. Exit status 0 after a checkpoint signal
#   (a program that exits 0 after a requested checkpoint; the examples exit 75)
#   is requeued: the next run restores the latest checkpoint and either goes
#   on or, having nothing left to do, exits 0 at once.
#
# Settings (environment, all optional; sbatch passes the submitting shell's
# environment to the job):
#   DMUON_RUN_DIR            run directory (default $SLURM_SUBMIT_DIR/runs/<job name>-<job id>)
#   DMUON_REQUEUE_EXIT_CODE  exit status meaning "checkpointed, requeue me" (default 75)
#   DMUON_DONE_FILE          file the program writes when finished, relative to the run directory
#   DMUON_MAX_RESTARTS       requeue at most this many times (default 20): a program that
#                            never finishes must not cycle through the queue forever

: "${DMUON_REQUEUE_EXIT_CODE:=75}"
: "${DMUON_MAX_RESTARTS:=20}"
: "${DMUON_DONE_FILE:=}"

DMUON_SIGNALLED=0      # a checkpoint signal reached this batch shell
DMUON_STEP_PID=""      # the job step (srun) while it runs
DMUON_TRAPPED=0        # set by the trap, so that the wait loop knows why wait returned
DMUON_STEP_RC=""

# One line per event, prefixed so that `grep dmuon-job` on the output shows the
# job's history across requeues (the output file is appended to, not replaced).
dmuon_log() {
  printf '[dmuon-job %s job %s restart %s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${SLURM_JOB_ID:-none}" \
    "${SLURM_RESTART_COUNT:-0}" "$*"
}

dmuon_job_begin() {
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "dmuon_job.sh: not inside a Slurm job (submit this script with sbatch)" >&2
    exit 2
  fi
  dmuon_log "start: SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} nodes=${SLURM_JOB_NODELIST:-?}" \
    "tasks=${SLURM_NTASKS:-?} cpus-per-task=${SLURM_CPUS_PER_TASK:-?} batch host=$(hostname)"
  trap dmuon_on_checkpoint_signal USR1
}

# The trap. Signal handlers in bash run between commands, so this runs when the
# `wait` in dmuon_job_run returns early because of the signal.
dmuon_on_checkpoint_signal() {
  DMUON_SIGNALLED=1
  DMUON_TRAPPED=1
  if [ -z "$DMUON_STEP_PID" ]; then
    dmuon_log "checkpoint signal received while no job step runs"
    return
  fi
  dmuon_log "checkpoint signal received: forwarding SIGUSR1 to the job step"
  # Without --batch/--full, scancel signals the job's steps and not this batch
  # shell, so the signal reaches every task of the srun step (on every node)
  # from slurmstepd, whatever srun itself forwards.
  scancel --signal=USR1 "$SLURM_JOB_ID" ||
    dmuon_log "scancel --signal=USR1 failed (status $?)"
}

# Where the program runs: its relative paths (checkpoint directory, loss file)
# land here, and a requeued run of the same job finds its checkpoints again.
dmuon_job_enter_run_dir() {
  : "${DMUON_RUN_DIR:=${SLURM_SUBMIT_DIR:-$PWD}/runs/${SLURM_JOB_NAME:-dmuon}-${SLURM_JOB_ID}}"
  mkdir -p "$DMUON_RUN_DIR" || exit 1
  cd "$DMUON_RUN_DIR" || exit 1
  dmuon_log "run directory $DMUON_RUN_DIR"
}

# Runs "$@" (the srun line) in the background and waits for it, so that the
# trap can run meanwhile (bash defers traps while a foreground command runs).
dmuon_job_run() {
  if [ "$DMUON_SIGNALLED" -eq 1 ]; then
    # The wall time is near already: starting would only be killed.
    dmuon_log "checkpoint signal came before the job step started: not starting it"
    DMUON_STEP_RC=$DMUON_REQUEUE_EXIT_CODE
    return
  fi
  dmuon_log "job step: $*"
  "$@" &
  DMUON_STEP_PID=$!
  local rc
  while :; do
    DMUON_TRAPPED=0
    wait "$DMUON_STEP_PID"
    rc=$?
    # wait returned because the trap ran, not because the step ended: wait again.
    [ "$DMUON_TRAPPED" -eq 1 ] || break
  done
  DMUON_STEP_PID=""
  DMUON_STEP_RC=$rc
  dmuon_log "job step ended with status $rc"
}

dmuon_job_requeue() {
  local restarts=${SLURM_RESTART_COUNT:-0}
  if [ "$restarts" -ge "$DMUON_MAX_RESTARTS" ]; then
    dmuon_log "FAILED: $restarts restarts already (DMUON_MAX_RESTARTS=$DMUON_MAX_RESTARTS); not requeueing"
    exit 1
  fi
  dmuon_log "REQUEUE: requeueing job $SLURM_JOB_ID to continue from the latest checkpoint"
  # The job goes back to the queue; Slurm then ends this run of the script.
  if ! scontrol requeue "$SLURM_JOB_ID"; then
    dmuon_log "FAILED: scontrol requeue failed (was the job submitted with --requeue?)"
    exit 1
  fi
  exit 0
}

dmuon_job_finish() {
  local rc=$DMUON_STEP_RC
  if [ "$rc" = "$DMUON_REQUEUE_EXIT_CODE" ]; then
    dmuon_log "program checkpointed and asked to be run again (status $rc)"
    dmuon_job_requeue
  fi
  if [ "$rc" -eq 0 ] && [ -n "$DMUON_DONE_FILE" ]; then
    if [ -e "$DMUON_DONE_FILE" ]; then
      dmuon_log "FINISHED: $DMUON_DONE_FILE exists"
      exit 0
    fi
    dmuon_log "program exited 0 without writing $DMUON_DONE_FILE: more to do"
    dmuon_job_requeue
  fi
  if [ "$rc" -eq 0 ] && [ "$DMUON_SIGNALLED" -eq 0 ]; then
    dmuon_log "FINISHED"
    exit 0
  fi
  if [ "$rc" -eq 0 ]; then
    dmuon_log "program exited 0 after the checkpoint signal: continuing from its checkpoint in a new run"
    dmuon_job_requeue
  fi
  if [ "$DMUON_SIGNALLED" -eq 1 ]; then
    # Most likely the signal came before the program had installed its handler
    # (SIGUSR1's default action ends a process): the periodic checkpoints remain.
    dmuon_log "program failed (status $rc) after the checkpoint signal: continuing from the latest checkpoint"
    dmuon_job_requeue
  fi
  dmuon_log "FAILED: program exited with status $rc"
  exit "$rc"
}
