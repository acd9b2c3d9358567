#!/usr/bin/env bash
# The job scripts' dry-run mode (DMUON_DRY_RUN=1, no Slurm needed): the srun
# line and run directory each variant would use, and the sbatch lines of
# jobscripts/submit_chain.sh. What a local single-node Slurm cannot run
# (PMI2, several nodes' partitions, Lustre striping) is checked here, as the
# commands the scripts would give.
#
#   tests/slurm/test_dry_run.sh SOURCE_DIR
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 SOURCE_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/dmuon-dry-run-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
cd "$work"

# expect NAME REGEX SCRIPT [VAR=VALUE...] -- [script arguments]: the dry run
# of SCRIPT prints a line matching REGEX, exits 0 and creates nothing.
expect() {
  local name=$1 regex=$2 script=$3 status=0
  shift 3
  local assignments=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    assignments+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  env -u SLURM_JOB_ID DMUON_DRY_RUN=1 DMUON_JOBSCRIPTS="$src/jobscripts" SLURM_SUBMIT_DIR="$work" \
    "${assignments[@]}" bash "$src/jobscripts/$script" "$@" >"$name.out" 2>&1 || status=$?
  if [ "$status" -ne 0 ] || ! grep -Eq -- "$regex" "$name.out" || [ -e "$work/runs" ]; then
    echo "FAIL $name: status $status, want a line matching: $regex"
    sed 's/^/  /' "$name.out"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -E -- "$regex" "$name.out" | head -n 1 | sed 's/^\[[^]]*\] //')"
  fi
}

step='dry run: job step: srun'
expect cpu "$step --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores .*/burgers_surrogate_c --config=.*/surrogate.cfg --backend=cpu --steps=9 \$" \
  cpu_job.sh -- --steps=9
expect cpu-pmi2 "$step --mpi=pmi2 --kill-on-bad-exit=1 " cpu_job.sh DMUON_MPI=pmi2 --
expect cpu-sbatch-lines '^    #SBATCH --signal=B:USR1@120$' cpu_job.sh --
expect cpu-scratch "dry run: run directory $work/scratch/runs/dmuon-DRYRUN " cpu_job.sh DMUON_SCRATCH="$work/scratch" --
expect cpu-site-scratch "dry run: run directory $work/site/runs/dmuon-DRYRUN " cpu_job.sh SCRATCH="$work/site" --
expect cpu-stripe "dry run: lfs setstripe -c 4 $work/runs/dmuon-DRYRUN\$" cpu_job.sh DMUON_STRIPE_COUNT=4 --
expect cpu-chain "dry run: run directory $work/runs/mychain \\(resubmit: chain\\)" cpu_job.sh DMUON_RESUBMIT=chain \
  SLURM_JOB_NAME=mychain --
expect cpu-array-chain "dry run: run directory $work/runs/mychain-77 " cpu_job.sh DMUON_RESUBMIT=chain \
  SLURM_JOB_NAME=mychain SLURM_ARRAY_JOB_ID=77 --
expect gpu-node "$step --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores [^ ]*/burgers_surrogate_c .* --backend=cuda \$" gpu_job.sh --
expect gpu-task "$step --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores --gpus-per-task=1 .* --backend=cuda:current \$" \
  gpu_job.sh DMUON_GPU_BINDING=task --
expect gpu-pmi2 "$step --mpi=pmi2 " gpu_job.sh DMUON_MPI=pmi2 --
expect gpu-sbatch-lines '^    #SBATCH --gpus-per-node=4$' gpu_job.sh --
# A bad binding is refused, also in a dry run.
if env DMUON_DRY_RUN=1 DMUON_GPU_BINDING=socket DMUON_JOBSCRIPTS="$src/jobscripts" bash "$src/jobscripts/gpu_job.sh" \
  >bad.out 2>&1 || ! grep -q "DMUON_GPU_BINDING=socket: use node or task" bad.out; then
  echo "FAIL gpu-bad-binding:"; sed 's/^/  /' bad.out; failures=$((failures + 1))
else
  echo "ok   gpu-bad-binding"
fi

# submit_chain.sh: N singleton jobs of one name, or one array with %1.
chain=$src/jobscripts/submit_chain.sh
DMUON_DRY_RUN=1 DMUON_CHAIN_NAME=c1 DMUON_SBATCH_OPTIONS="--time=01:00:00" "$chain" 3 "$src/jobscripts/cpu_job.sh" --steps=5 \
  >chain.out
want="sbatch --parsable --job-name=c1 --export=ALL\\\\,DMUON_RESUBMIT=chain --time=01:00:00 --dependency=singleton $src/jobscripts/cpu_job.sh --steps=5 \$"
if [ "$(grep -Ec -- "^$want" chain.out)" != 3 ] || [ "$(wc -l <chain.out)" != 3 ]; then
  echo "FAIL chain-singleton:"; sed 's/^/  /' chain.out; failures=$((failures + 1))
else
  echo "ok   chain-singleton: $(head -n 1 chain.out)"
fi
DMUON_DRY_RUN=1 DMUON_CHAIN_MODE=array DMUON_CHAIN_NAME=c2 "$chain" 4 "$src/jobscripts/gpu_job.sh" >array.out
if [ "$(wc -l <array.out)" != 1 ] || ! grep -q -- "--job-name=c2 .* --array=1-4%1 $src/jobscripts/gpu_job.sh \$" array.out; then
  echo "FAIL chain-array:"; sed 's/^/  /' array.out; failures=$((failures + 1))
else
  echo "ok   chain-array: $(cat array.out)"
fi
for bad in "0 $src/jobscripts/cpu_job.sh" "2 $work/no_such_script.sh"; do
  # shellcheck disable=SC2086  # two words on purpose
  if DMUON_DRY_RUN=1 "$chain" $bad >bad.out 2>&1; then
    echo "FAIL chain-bad ($bad) was accepted"; failures=$((failures + 1))
  fi
done

if [ "$failures" -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
