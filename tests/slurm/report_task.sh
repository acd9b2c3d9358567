#!/bin/bash
# Stand-in for the program in the GPU job-script test (no GPU here): each task
# prints what it was given, one line, for test_gpu_binding.sh to check.
echo "task rank=${SLURM_PROCID:-?} local=${SLURM_LOCALID:-?} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} args: $*"
