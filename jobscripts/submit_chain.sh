#!/bin/bash
# A chain of jobs instead of self-requeue, for sites that forbid requeue or
# cap it: N jobs of one name queued at once, each starting when the one
# before it has ended (--dependency=singleton), or one array whose tasks run
# one at a time (--array=1-N%1). Each job runs the job script in chain mode
# (DMUON_RESUBMIT=chain): it checkpoints before its time limit and exits; the
# next job restores that checkpoint from the same run directory
# ($DMUON_SCRATCH/runs/<chain name>). A job that finds the run finished (or
# failed) ends at once, so surplus jobs cost seconds.
#
#   jobscripts/submit_chain.sh N JOB_SCRIPT [program arguments]
#   jobscripts/submit_chain.sh 5 jobscripts/cpu_job.sh --steps=200000
#   DMUON_CHAIN_MODE=array jobscripts/submit_chain.sh 5 jobscripts/gpu_job.sh
#   DMUON_DRY_RUN=1 jobscripts/submit_chain.sh 5 jobscripts/cpu_job.sh   # print the sbatch lines only
#
# Settings (environment):
#   DMUON_CHAIN_MODE      singleton (default) or array
#   DMUON_CHAIN_NAME      the job name, which names the run directory too (default dmuon-<date>-<time>);
#                         the same name later continues that run with a new chain
#   DMUON_SBATCH_OPTIONS  more sbatch options for every job (--time=..., --partition=...)
set -euo pipefail

if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N JOB_SCRIPT [program arguments]   (N >= 1 jobs)" >&2
  exit 2
fi
count=$1 script=$2
shift 2
: "${DMUON_CHAIN_MODE:=singleton}"
: "${DMUON_CHAIN_NAME:=dmuon-$(date +%Y%m%d-%H%M%S)}"
: "${DMUON_SBATCH_OPTIONS:=}"
: "${DMUON_DRY_RUN:=0}"
[ -f "$script" ] || { echo "submit_chain.sh: no job script $script" >&2; exit 2; }

# DMUON_SBATCH_OPTIONS is a list of words: split on purpose.
# shellcheck disable=SC2206
common=(--parsable --job-name="$DMUON_CHAIN_NAME" "--export=ALL,DMUON_RESUBMIT=chain" $DMUON_SBATCH_OPTIONS)
case $DMUON_CHAIN_MODE in
  singleton) commands=$count; chain_options=(--dependency=singleton) ;;
  array) commands=1; chain_options=(--array=1-"$count"%1) ;;
  *) echo "submit_chain.sh: DMUON_CHAIN_MODE=$DMUON_CHAIN_MODE: use singleton or array" >&2; exit 2 ;;
esac

for ((i = 1; i <= commands; ++i)); do
  command=(sbatch "${common[@]}" "${chain_options[@]}" "$script" "$@")
  if [ "$DMUON_DRY_RUN" = 1 ]; then
    printf '%q ' "${command[@]}"
    echo
  else
    id=$("${command[@]}")
    echo "submitted job ${id%%;*} ($DMUON_CHAIN_MODE chain $DMUON_CHAIN_NAME, $i of $commands)"
  fi
done
