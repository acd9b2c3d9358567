#!/usr/bin/env bash
# The demo: the Burgers surrogate example (examples/c) on 2 ranks, trained
# once with Muon on the hidden matrices + AdamW on the rest and once with
# AdamW alone, on the same data from the same initial weights. Prints the
# progress of each, then how many steps each needs to reach the same loss,
# and writes BUILD_DIR/demo/loss_curves.csv and loss_curves.png.
#
#   examples/run_demo.sh [BUILD_DIR] [--np N] [--out DIR] [--any-example-option=value ...]
#
# BUILD_DIR defaults to ./build, DIR to BUILD_DIR/demo; the other options go
# to both runs (for example --steps=300 for a short demo, --backend=cpu).
# Needs gnuplot (Debian: gnuplot-nox) for the image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
np=2
out=$build/demo
while [ $# -ge 2 ]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) break ;;
  esac
done
# The build of dmuon's tree, or of the installed examples on their own.
exe=$build/examples/burgers_surrogate_c
[ -x "$exe" ] || exe=$build/burgers_surrogate_c
[ -x "$exe" ] || { echo "run_demo.sh: no burgers_surrogate_c in $build or $build/examples: build first" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "run_demo.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"

# The MPI launcher the build found; OpenMPI wants to be told about root and
# about more ranks than cores.
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
mpiexec=${mpiexec:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Backend "auto" (the config's) takes the GPUs when every rank sees one, but
# NCCL needs a GPU per rank: with fewer GPUs than ranks, the CPU it is.
if ! printf '%s\n' "$@" | grep -q -- '^--backend'; then
  gpus=0
  if command -v nvidia-smi >/dev/null; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    visible=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
    [ "$visible" -lt "$gpus" ] && gpus=$visible
  fi
  if [ "$gpus" -gt 0 ] && [ "$gpus" -lt "$np" ]; then
    echo "note: $gpus GPU(s) for $np ranks (one GPU per rank is needed): running on the CPU"
    set -- "$@" --backend=cpu
  fi
fi

run() {  # run NAME OPTIMIZER: one training run, progress to the terminal
  echo "== $1"
  rm -rf "$out/checkpoints_$2"
  "$mpiexec" -n "$np" "$exe" --config "$here/surrogate.cfg" --optimizer="$2" --restart=0 \
    --loss_csv="$out/loss_$2.csv" --checkpoint_dir="$out/checkpoints_$2" "${@:3}"
}
run "Muon (hidden matrices) + AdamW (rest)" muon "$@"
run "AdamW alone" adam "$@"

# One table: step, loss with Muon+AdamW, loss with AdamW alone.
paste -d, <(cut -d, -f1,2 "$out/loss_muon.csv") <(cut -d, -f2 "$out/loss_adam.csv") |
  sed '1s/.*/step,muon_adamw,adamw/' >"$out/loss_curves.csv"

# Steps to the same loss: each curve smoothed over 3 logged points (the loss
# jumps when a new episode starts); the headline target is the larger of the
# two best smoothed losses, a loss both reach; then the steps to a few
# decades of loss, to show where each optimizer is ahead.
awk -F, 'function first(curve, level,   i) {
    for (i = 1; i <= n; i++) if (curve[i] <= level) return step[i]
    return 0
  }
  function show(label, level,   sa, sb) {
    sa = first(ma, level); sb = first(mb, level)
    printf "  %-22s %14s %14s", label, sa ? sa : "not reached", sb ? sb : "not reached"
    if (sa && sb) printf "   %.2fx", sb / sa
    printf "\n"
  }
  NR > 1 { n++; step[n] = $1; a[n] = $2; b[n] = $3 }
  END {
    for (i = 1; i <= n; i++) {
      lo = i > 2 ? i - 2 : 1; sa = sb = 0
      for (j = lo; j <= i; j++) { sa += a[j]; sb += b[j] }
      ma[i] = sa / (i - lo + 1); mb[i] = sb / (i - lo + 1)
      if (i == 1 || ma[i] < best_a) best_a = ma[i]
      if (i == 1 || mb[i] < best_b) best_b = mb[i]
    }
    target = best_a > best_b ? best_a : best_b
    printf "\nsteps to reach a loss (curves smoothed over 3 log points):\n"
    printf "  %-22s %14s %14s   %s\n", "loss", "Muon + AdamW", "AdamW alone", "AdamW / Muon"
    show(sprintf("%.3e (both reach)", target), target)
    for (level = 0.1; level > target; level /= sqrt(10)) show(sprintf("%.3e", level), level)
    printf "final loss: Muon + AdamW %.3e, AdamW alone %.3e\n", a[n], b[n]
  }' "$out/loss_curves.csv" | tee "$out/summary.txt"

gnuplot <<GP
set terminal pngcairo size 900,560 enhanced font "sans,11"
set output "$out/loss_curves.png"
set datafile separator ","
set title "Burgers surrogate trained online on $np ranks: relative loss"
set xlabel "training step"
set ylabel "relative MSE (MSE / mean squared target)"
set logscale y
set grid
set key top right
plot "$out/loss_curves.csv" using 1:2 skip 1 with linespoints lw 2 pt 7 ps 0.5 title "Muon (hidden) + AdamW", \
     "$out/loss_curves.csv" using 1:3 skip 1 with linespoints lw 2 pt 5 ps 0.5 title "AdamW alone"
GP
echo "wrote $out/loss_curves.csv and $out/loss_curves.png"
