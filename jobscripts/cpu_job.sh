#!/bin/bash
# dmuon example (Burgers surrogate) on CPU nodes: one MPI rank per core group,
# checkpoint on a signal before the wall time, requeue, restart from the latest
# checkpoint. Submit from the top of the dmuon tree (or set the paths below):
#
#   sbatch jobscripts/cpu_job.sh                    # examples/surrogate.cfg as it is
#   sbatch jobscripts/cpu_job.sh --steps=20000      # extra arguments go to the program
#
#   DMUON_DRY_RUN=1 bash jobscripts/cpu_job.sh   # print the run directory and srun line, run nothing
#   jobscripts/submit_chain.sh 5 jobscripts/cpu_job.sh   # a chain of 5 jobs, where requeue is not allowed
#
# Lines marked CHANGE are the ones a user adapts (docs/cluster.md says more).
# "##SBATCH" is a comment for sbatch: remove one "#" to use such a line.
#
#SBATCH --job-name=dmuon-cpu
##SBATCH --partition=compute          # CHANGE: your site's CPU partition
##SBATCH --account=myproject          # CHANGE: the project the hours are charged to
#SBATCH --nodes=1                     # CHANGE: nodes
#SBATCH --ntasks-per-node=2           # CHANGE: MPI ranks per node
#SBATCH --cpus-per-task=1             # CHANGE: cores per rank (BLAS threads of Newton-Schulz)
#SBATCH --time=00:30:00               # CHANGE: wall time of one run (the job runs again after a requeue)
# SIGUSR1 to this batch shell (B:) 120 s before the time limit: long enough for
# the program to reach its next step and write a checkpoint. CHANGE the 120 if
# a checkpoint of your model takes longer.
#SBATCH --signal=B:USR1@120
# The job may be put back in the queue (by the script itself, after a
# checkpoint on signal, or by the site on preemption / node failure).
#SBATCH --requeue
# Append: a requeued run writes to the same file after the earlier runs.
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

set -uo pipefail  # no -e: the script itself decides what a non-zero status means

# CHANGE: the environment the program was built in, e.g.
# module load gcc/12 openmpi/4.1 hdf5/1.14-mpi openblas

# CHANGE: what runs. Environment variables of the same names win, so a test or
# a wrapper can point at another build without editing this file.
: "${DMUON_PROGRAM:=${SLURM_SUBMIT_DIR:-$PWD}/build/examples/burgers_surrogate_c}"   # or burgers_surrogate_f (Fortran)
: "${DMUON_CONFIG:=${SLURM_SUBMIT_DIR:-$PWD}/examples/surrogate.cfg}"
# How srun starts the MPI ranks: pmix for Open MPI 4 and later; pmi2 for
# MPICH-derived MPIs and Cray (or cray_shasta on HPE Cray EX). CHANGE to your
# site's plugin: `srun --mpi=list`.
: "${DMUON_MPI:=pmix}"
# srun options: --kill-on-bad-exit=1 ends every rank as soon as one fails
# (a rank that stops alone would leave the others waiting in a collective
# until the wall time); --cpu-bind=cores pins each rank to its cores so BLAS
# threads do not wander. Several nodes need nothing more: srun starts
# --ntasks-per-node ranks on each node of the job (sbatch --nodes=4 ...).
: "${DMUON_SRUN_OPTIONS:=--mpi=$DMUON_MPI --kill-on-bad-exit=1 --cpu-bind=cores}"

# One BLAS/OpenMP thread per core of the rank. Since Slurm 22.05 srun may not
# take --cpus-per-task from the job (see its release notes): SRUN_CPUS_PER_TASK does.
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

# The shared helper. sbatch runs a copy of this script from a spool directory,
# so the helper is found from the submission directory (CHANGE DMUON_JOBSCRIPTS
# when submitting from elsewhere).
: "${DMUON_JOBSCRIPTS:=${SLURM_SUBMIT_DIR:-$PWD}/jobscripts}"
# shellcheck source=jobscripts/lib/dmuon_job.sh
source "$DMUON_JOBSCRIPTS/lib/dmuon_job.sh" || exit 1

dmuon_job_begin
dmuon_job_enter_run_dir
# DMUON_SRUN_OPTIONS is a list of words: split on purpose.
# shellcheck disable=SC2086
dmuon_job_run srun $DMUON_SRUN_OPTIONS "$DMUON_PROGRAM" --config="$DMUON_CONFIG" --backend=cpu "$@"
dmuon_job_finish
