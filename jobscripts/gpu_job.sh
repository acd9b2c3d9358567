#!/bin/bash
# dmuon example (Burgers surrogate) on GPU nodes: one MPI rank per GPU,
# checkpoint on a signal before the wall time, requeue, restart from the latest
# checkpoint. Submit from the top of the dmuon tree (or set the paths below):
#
#   sbatch jobscripts/gpu_job.sh                    # examples/surrogate.cfg as it is
#   sbatch jobscripts/gpu_job.sh --hidden=1024      # extra arguments go to the program
#
#   DMUON_DRY_RUN=1 bash jobscripts/gpu_job.sh   # print the run directory and srun line, run nothing
#   jobscripts/submit_chain.sh 5 jobscripts/gpu_job.sh   # a chain of 5 jobs, where requeue is not allowed
#
# Lines marked CHANGE are the ones a user adapts (docs/cluster.md says more).
# "##SBATCH" is a comment for sbatch: remove one "#" to use such a line.
#
#SBATCH --job-name=dmuon-gpu
##SBATCH --partition=gpu              # CHANGE: your site's GPU partition
##SBATCH --account=myproject          # CHANGE: the project the hours are charged to
#SBATCH --nodes=1                     # CHANGE: nodes
# One rank per GPU: ranks per node = GPUs per node (NCCL refuses two ranks on
# one GPU). CHANGE both together.
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8             # CHANGE: cores per rank (node cores / GPUs per node)
#SBATCH --time=01:00:00               # CHANGE: wall time of one run (the job runs again after a requeue)
# SIGUSR1 to this batch shell (B:) 180 s before the time limit: time to reach
# the next step and write the checkpoint (device buffers are staged through
# the host). CHANGE if a checkpoint of your model takes longer.
#SBATCH --signal=B:USR1@180
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

set -uo pipefail  # no -e: the script itself decides what a non-zero status means

# CHANGE: the environment the program was built in, e.g.
# module load gcc/12 cuda/12.4 nccl openmpi/4.1 hdf5/1.14-mpi

# CHANGE: what runs (environment variables of the same names win).
: "${DMUON_PROGRAM:=${SLURM_SUBMIT_DIR:-$PWD}/build/examples/burgers_surrogate_c}"   # or burgers_surrogate_f (Fortran)
: "${DMUON_CONFIG:=${SLURM_SUBMIT_DIR:-$PWD}/examples/surrogate.cfg}"
# How srun starts the MPI ranks: pmix for Open MPI 4 and later; pmi2 for
# MPICH-derived MPIs and Cray (cray_shasta on HPE Cray EX). CHANGE: `srun --mpi=list`.
: "${DMUON_MPI:=pmix}"
# Which GPU each rank takes (CHANGE to task where the site enforces per-task binding):
# - node (default): the step inherits the job's GPUs and every rank sees all
#   GPUs of its node (CUDA_VISIBLE_DEVICES=0,...,N-1); dmuon takes the one
#   numbered by the rank's place on the node (backend "cuda"), and NCCL sees
#   the peers, so it uses NVLink between them. Do not add --gpu-bind=none
#   (Slurm 22.05 then sets no CUDA_VISIBLE_DEVICES at all: every GPU of the
#   node shows, not only the job's).
# - task: srun --gpus-per-task=1, each rank sees one GPU, its own, and dmuon
#   takes the device the process sees (backend "cuda:current"). For sites that
#   require per-task binding; NCCL may then lose the direct paths between the
#   GPUs (each process sees one device), so prefer node where it is allowed.
: "${DMUON_GPU_BINDING:=node}"
# srun options: --kill-on-bad-exit=1 ends every rank as soon as one fails
# (the others would wait in a collective until the wall time); --cpu-bind=cores
# keeps each rank on its own cores (CHANGE to your site's advice for GPU-CPU
# affinity, e.g. --cpu-bind=socket on two-socket nodes). Several nodes need
# nothing more: sbatch --nodes=2 --gpus-per-node=4 --ntasks-per-node=4 ...
: "${DMUON_SRUN_OPTIONS:=--mpi=$DMUON_MPI --kill-on-bad-exit=1 --cpu-bind=cores}"
case $DMUON_GPU_BINDING in
  node) : "${DMUON_BACKEND:=cuda}" ;;
  task) DMUON_SRUN_OPTIONS="$DMUON_SRUN_OPTIONS --gpus-per-task=1"; : "${DMUON_BACKEND:=cuda:current}" ;;
  *) echo "gpu_job.sh: DMUON_GPU_BINDING=$DMUON_GPU_BINDING: use node or task" >&2; exit 2 ;;
esac

# Cores per rank for srun too (see cpu_job.sh), and as many BLAS/OpenMP threads.
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export OPENBLAS_NUM_THREADS=$OMP_NUM_THREADS

# Checkpoints: HDF5 1.10+ locks the files it opens (flock), which Lustre and
# GPFS mounts without flock support refuse ("unable to lock file"). dmuon
# commits each checkpoint by an atomic rename and never reads a file being
# written, so the lock protects nothing here. CHANGE to TRUE only if your
# site asks for it.
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
# CHANGE: where run directories go (checkpoints, loss file): the scratch file
# system, e.g. DMUON_SCRATCH=/scratch/$USER; default $SCRATCH if set, else the
# submission directory. On Lustre, DMUON_STRIPE_COUNT=4 (say) stripes each new
# run directory: checkpoints of many ranks then spread over several OSTs.
# : "${DMUON_SCRATCH:=/scratch/$USER}"
# : "${DMUON_STRIPE_COUNT:=4}"

: "${DMUON_JOBSCRIPTS:=${SLURM_SUBMIT_DIR:-$PWD}/jobscripts}"
# shellcheck source=jobscripts/lib/dmuon_job.sh
source "$DMUON_JOBSCRIPTS/lib/dmuon_job.sh" || exit 1

dmuon_job_begin
dmuon_job_enter_run_dir
# DMUON_SRUN_OPTIONS is a list of words: split on purpose.
# shellcheck disable=SC2086
dmuon_job_run srun $DMUON_SRUN_OPTIONS "$DMUON_PROGRAM" --config="$DMUON_CONFIG" --backend="$DMUON_BACKEND" "$@"
dmuon_job_finish
