#!/bin/sh
# CTest driver of test_cuda_vs_torch: dump with dmuon, repeat with torch, compare.
#   torch_compare.sh OUTDIR LAUNCH...   (LAUNCH: the dump program, behind mpiexec -n N ...)
# Exit 77 (skipped) without a GPU or without PyTorch.
set -u
dir=$1
shift
python3 -c "import torch, numpy; assert torch.cuda.is_available()" 2>/dev/null || { echo "no torch with CUDA: skipped"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$@" "$dir"
rc=$?
[ $rc -eq 0 ] || exit $rc
exec python3 "$(dirname "$0")/torch_compare.py" "$dir"
