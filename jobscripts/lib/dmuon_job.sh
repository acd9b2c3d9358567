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
#   DMUON_SCRATCH            where run directories go: a parallel scratch file system, not $HOME
#                            (default $SCRATCH when the site sets it, else $SLURM_SUBMIT_DIR)
#   DMUON_RUN_DIR            run directory (default $DMUON_SCRATCH/runs/<run name>: <job name>-<job id>,
#                            or for a chain <job name> (singleton) / <job name>-<array job id> (array))
#   DMUON_STRIPE_COUNT       Lustre: stripe the new run directory over this many OSTs (lfs setstripe -c);
#                            unset: the file system's default
#   DMUON_RESUBMIT           how the next run starts: requeue (default, scontrol requeue of this job), or
#                            chain (the next job of a chain that jobscripts/submit_chain.sh submitted,
#                            --dependency=singleton or an array with %1; for sites that forbid requeue)
#   DMUON_DRY_RUN            1: print the run directory and the srun line, run nothing (works outside Slurm)
#   DMUON_REQUEUE_EXIT_CODE  exit status meaning "checkpointed, requeue me" (default 75)
#   DMUON_DONE_FILE          file the program writes when finished, relative to the run directory
#   DMUON_MAX_RESTARTS       requeue at most this many times (default 20): a program that
#                            never finishes must not cycle through the queue forever

: "${DMUON_REQUEUE_EXIT_CODE:=75}"
: "${DMUON_MAX_RESTARTS:=20}"
: "${DMUON_DONE_FILE:=}"
: "${DMUON_RESUBMIT:=requeue}"
: "${DMUON_DRY_RUN:=0}"
: "${DMUON_STRIPE_COUNT:=}"
# Markers in the run directory that end a chain: later jobs of it exit at once.
DMUON_CHAIN_FINISHED=CHAIN_FINISHED
DMUON_CHAIN_FAILED=CHAIN_FAILED

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
  case $DMUON_RESUBMIT in
    requeue | chain) ;;
    *) echo "dmuon_job.sh: DMUON_RESUBMIT=$DMUON_RESUBMIT: use requeue or chain" >&2; exit 2 ;;
  esac
  if [ "$DMUON_DRY_RUN" = 1 ] && [ -z "${SLURM_JOB_ID:-}" ]; then
    # What sbatch would give the script, so that the lines below print as in a job.
    SLURM_JOB_ID=DRYRUN SLURM_JOB_NAME=${SLURM_JOB_NAME:-dmuon} SLURM_SUBMIT_DIR=${SLURM_SUBMIT_DIR:-$PWD}
    dmuon_log "dry run of $0: what sbatch would read from it (the sbatch command line wins):"
    grep '^#SBATCH' "$0" | sed 's/[[:space:]][[:space:]]*#.*$//; s/^/    /' || true
  fi
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "dmuon_job.sh: not inside a Slurm job (submit this script with sbatch, or DMUON_DRY_RUN=1 to see what it runs)" >&2
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
# The run name: the same for every run that continues this one (a requeue
# keeps the job id; the jobs of a chain share the job name, an array's tasks
# the array job id).
dmuon_run_name() {
  local name=${SLURM_JOB_NAME:-dmuon}
  if [ "$DMUON_RESUBMIT" = chain ] && [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
    echo "$name-$SLURM_ARRAY_JOB_ID"
  elif [ "$DMUON_RESUBMIT" = chain ]; then
    echo "$name"
  else
    echo "$name-$SLURM_JOB_ID"
  fi
}

# Where the program runs: its relative paths (checkpoint directory, loss file)
# land here, and a requeued run of the same job finds its checkpoints again.
# Checkpoints belong on the parallel scratch file system: $HOME is small,
# slow for parallel writes and often read-only on compute nodes.
dmuon_job_enter_run_dir() {
  : "${DMUON_SCRATCH:=${SCRATCH:-${SLURM_SUBMIT_DIR:-$PWD}}}"
  : "${DMUON_RUN_DIR:=$DMUON_SCRATCH/runs/$(dmuon_run_name)}"
  if [ "$DMUON_DRY_RUN" = 1 ]; then
    dmuon_log "dry run: run directory $DMUON_RUN_DIR (resubmit: $DMUON_RESUBMIT)"
    [ -n "$DMUON_STRIPE_COUNT" ] && dmuon_log "dry run: lfs setstripe -c $DMUON_STRIPE_COUNT $DMUON_RUN_DIR"
    return 0
  fi
  if [ ! -d "$DMUON_RUN_DIR" ]; then
    mkdir -p "$DMUON_RUN_DIR" || exit 1
    # New files inherit a directory's striping: set it before the first checkpoint.
    if [ -n "$DMUON_STRIPE_COUNT" ]; then
      lfs setstripe -c "$DMUON_STRIPE_COUNT" "$DMUON_RUN_DIR" ||
        dmuon_log "lfs setstripe -c $DMUON_STRIPE_COUNT failed (not Lustre?): default striping"
    fi
  fi
  cd "$DMUON_RUN_DIR" || exit 1
  dmuon_log "run directory $DMUON_RUN_DIR"
  if [ "$DMUON_RESUBMIT" = chain ] && [ -e "$DMUON_CHAIN_FINISHED" ]; then
    dmuon_log "FINISHED already (an earlier job of the chain wrote $DMUON_CHAIN_FINISHED): nothing to do"
    exit 0
  fi
  if [ "$DMUON_RESUBMIT" = chain ] && [ -e "$DMUON_CHAIN_FAILED" ]; then
    dmuon_log "FAILED: an earlier job of the chain failed ($DMUON_RUN_DIR/$DMUON_CHAIN_FAILED): not starting"
    exit 1
  fi
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
  if [ "$DMUON_DRY_RUN" = 1 ]; then
    dmuon_log "dry run: job step: $(printf '%q ' "$@")"
    DMUON_STEP_RC=0
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
  if [ "$DMUON_RESUBMIT" = chain ]; then
    # The next job of the chain is queued already: it starts when this one ends.
    dmuon_log "CHAIN: the next job of the chain continues from the latest checkpoint"
    exit 0
  fi
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

# The end of a chain: later jobs of it see the marker and exit at once.
dmuon_job_end_chain() {
  [ "$DMUON_RESUBMIT" = chain ] && [ "$DMUON_DRY_RUN" != 1 ] && : >"$1"
  return 0
}

dmuon_job_finish() {
  local rc=$DMUON_STEP_RC
  if [ "$DMUON_DRY_RUN" = 1 ]; then
    dmuon_log "dry run: nothing ran"
    exit 0
  fi
  if [ "$rc" = "$DMUON_REQUEUE_EXIT_CODE" ]; then
    dmuon_log "program checkpointed and asked to be run again (status $rc)"
    dmuon_job_requeue
  fi
  if [ "$rc" -eq 0 ] && [ -n "$DMUON_DONE_FILE" ]; then
    if [ -e "$DMUON_DONE_FILE" ]; then
      dmuon_log "FINISHED: $DMUON_DONE_FILE exists"
      dmuon_job_end_chain "$DMUON_CHAIN_FINISHED"
      exit 0
    fi
    dmuon_log "program exited 0 without writing $DMUON_DONE_FILE: more to do"
    dmuon_job_requeue
  fi
  if [ "$rc" -eq 0 ] && [ "$DMUON_SIGNALLED" -eq 0 ]; then
    dmuon_log "FINISHED"
    dmuon_job_end_chain "$DMUON_CHAIN_FINISHED"
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
  dmuon_job_end_chain "$DMUON_CHAIN_FAILED"
  exit "$rc"
}
