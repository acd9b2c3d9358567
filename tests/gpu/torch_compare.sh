#!/bin/sh
# CTest driver of test_cuda_vs_torch: dump with dmuon, repeat with torch, compare.
# Exit 77 (skipped) without a GPU or without PyTorch.
set -u
exe=$1
dir=$2
python3 -c "import torch, numpy; assert torch.cuda.is_available()" 2>/dev/null || { echo "no torch with CUDA: skipped"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$exe" "$dir"
rc=$?
[ $rc -eq 0 ] || exit $rc
exec python3 "$(dirname "$0")/torch_compare.py" "$dir"
