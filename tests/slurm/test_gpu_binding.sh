#!/usr/bin/env bash
# The GPU job script on a real single-node Slurm with two stand-in GPUs
# (gres/gpu backed by /dev/null and /dev/zero; this machine has no GPU):
#
#   tests/slurm/test_gpu_binding.sh SOURCE_DIR
#
# Submits jobscripts/gpu_job.sh as written, but for 2 ranks on 2 GPUs, with a
# program that reports its environment (report_task.sh), and checks that Slurm
# accepts the script's options, that the step runs one rank per GPU, and that
# every rank sees both of the job's GPUs (CUDA_VISIBLE_DEVICES=0,1), which is
# what dmuon's device choice (node-local rank modulo visible GPUs) needs; then
# the per-task variant (DMUON_GPU_BINDING=task): each rank sees one GPU and
# the program gets --backend=cuda:current.
# That the CUDA backend then runs is the GPU tests' business, not this one's.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 SOURCE_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/slurm/test_lib.sh
source "$here/test_lib.sh"

slurm_test_setup 2
export DMUON_PROGRAM=$here/report_task.sh
export DMUON_CONFIG=$src/examples/surrogate.cfg
export DMUON_JOBSCRIPTS=$src/jobscripts

note "job gpu: jobscripts/gpu_job.sh with 2 ranks on 2 GPUs"
# The script asks for 4 GPUs and 8 cores per rank; this node has 2 of each.
id=$(submit gpu "$src/jobscripts/gpu_job.sh" --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 -- --steps=7)
out=$scratch/gpu-$id.out
wait_job_end "$id" "$out" 120
cat "$out"
expect_state "$id" "$out" COMPLETED 0
expect_line "$id" "$out" '\] FINISHED$' "job gpu"
tasks=$(grep -c '^task ' "$out" || true)
[ "$tasks" -eq 2 ] || fail "job gpu ran $tasks tasks, expected 2"
for rank in 0 1; do
  expect_line "$id" "$out" "^task rank=$rank local=$rank CUDA_VISIBLE_DEVICES=0,1 args: --config=$src/examples/surrogate.cfg --backend=cuda --steps=7\$" \
    "rank $rank (both GPUs visible, the CUDA backend and the extra argument passed)"
done

note "job task: DMUON_GPU_BINDING=task (srun --gpus-per-task=1, backend cuda:current)"
export DMUON_GPU_BINDING=task
id=$(submit task "$src/jobscripts/gpu_job.sh" --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 -- --steps=7)
unset DMUON_GPU_BINDING
out=$scratch/task-$id.out
wait_job_end "$id" "$out" 120
cat "$out"
expect_state "$id" "$out" COMPLETED 0
tasks=$(grep -c '^task ' "$out" || true)
[ "$tasks" -eq 2 ] || fail "job task ran $tasks tasks, expected 2"
# Each rank sees one GPU, a different one: the device it sees is its own. (The
# test cluster has no device cgroups, so the indices are the node's: 0 and 1;
# with cgroups each rank would see its GPU as 0.)
devices=$(sed -n 's/^task rank=[01] local=[01] CUDA_VISIBLE_DEVICES=\([^ ]*\) args: .* --backend=cuda:current --steps=7$/\1/p' "$out" |
  sort -u | tr '\n' ' ')
[ "$devices" = "0 1 " ] ||
  fail "job task: each rank should see one GPU with backend cuda:current; saw CUDA_VISIBLE_DEVICES '$devices'"
note "PASS: gpu_job.sh runs one rank per GPU, every rank seeing both of the job's GPUs; with per-task binding each sees one, backend cuda:current"
