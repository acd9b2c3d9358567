#!/bin/sh
# Starts one rank of a multi-rank gpu test: gpu_rank.sh PROGRAM [ARGS...]
#
# Where the node has more ranks than visible GPUs (the one-GPU test machine),
# the ranks share a GPU on purpose: the opt-in DMUON_CUDA_SHARE_GPU=1, and a
# distinct NCCL_HOSTID per rank so that NCCL treats each rank as another host
# and moves the data through its socket transport on loopback. NCCL's own
# code paths run; the speed is not NVLink's (docs/guide/backends.md).
# With one GPU per rank it changes nothing.
local_ranks=${OMPI_COMM_WORLD_LOCAL_SIZE:-${MPI_LOCALNRANKS:-${SLURM_NTASKS_PER_NODE:-1}}}
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  gpus=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
if [ "$local_ranks" -gt "$gpus" ] && [ "$gpus" -gt 0 ]; then
  rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}}
  export DMUON_CUDA_SHARE_GPU=1 NCCL_HOSTID="dmuon-test-rank-$rank" NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
fi
exec "$@"
