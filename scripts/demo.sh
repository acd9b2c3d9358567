#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, run the demo on 2 ranks
# (backend "auto": the GPU when one is visible, else the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
examples/run_demo.sh build
