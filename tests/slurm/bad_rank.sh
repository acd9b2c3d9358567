#!/bin/bash
# Stand-in for a program one rank of which fails at once (as a Fortran
# `error stop` would) while the others wait, as they would in a collective
# that never completes: test_kill_chain.sh checks that srun's
# --kill-on-bad-exit ends the waiting ranks instead of the wall time.
if [ "${SLURM_PROCID:-0}" = 1 ]; then
  echo "rank 1: failing"
  exit 3
fi
echo "rank ${SLURM_PROCID:-0}: waiting"
sleep 600
echo "rank ${SLURM_PROCID:-0}: never ended by srun"
