#!/usr/bin/env bash
# The demo: the Burgers surrogate example (examples/c) on 2 ranks, trained
# once with Muon on the hidden matrices + AdamW on the rest and once with
# AdamW alone, on the same data from the same initial weights, each with the
# learning rates examples/sweep_lr.sh found best for this model. Prints the
# progress of each, then the steps and the seconds each needs to reach the
# same losses, and writes BUILD_DIR/demo/loss_curves.csv and loss_curves.png.
#
#   examples/run_demo.sh [BUILD_DIR] [--np N] [--out DIR] [--any-example-option=value ...]
#
# BUILD_DIR defaults to ./build, DIR to BUILD_DIR/demo; the other options go
# to both runs and win over the demo's (for example --steps=300 for a short
# demo, --backend=cpu). Needs gnuplot (Debian: gnuplot-nox) for the image.
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
# shellcheck source=examples/example_env.sh
source "$here/example_env.sh"
example_env "$build" run_demo.sh
command -v gnuplot >/dev/null || { echo "run_demo.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"

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

# The demo's model and learning rates: a wider surrogate than the config's
# (three 128 x 128 hidden matrices for Muon), and the rates of the sweep
# (examples/sweep_lr.sh --hidden=128 --layers=4; docs/examples.md shows it).
# AdamW's rate is the best of AdamW alone, used by both runs for their AdamW
# parameters; Muon's is the best with it.
demo_options=(--hidden=128 --layers=4 --adam_lr=0.003 --muon_lr=0.02 --log_every=25)

run() {  # run NAME OPTIMIZER [options]: one training run, progress to the terminal
  echo "== $1"
  rm -rf "$out/checkpoints_$2"
  # Options given later win: the demo's, then the caller's.
  "$mpiexec" -n "$np" "$exe" --config "$here/surrogate.cfg" --optimizer="$2" --restart=0 \
    --loss_csv="$out/loss_$2.csv" --checkpoint_dir="$out/checkpoints_$2" "${@:3}"
}
# Boost takes an option once: the caller's replace the demo's of the same key.
options=()
for o in "${demo_options[@]}"; do
  printf '%s\n' "$@" | grep -q -- "^${o%%=*}=" || options+=("$o")
done
options+=("$@")
run "Muon (hidden matrices) + AdamW (rest)" muon "${options[@]}"
run "AdamW alone" adam "${options[@]}"

# One table: step, loss with Muon+AdamW, loss with AdamW alone, and the
# seconds each run had taken by then.
paste -d, <(cut -d, -f1,2 "$out/loss_muon.csv") <(cut -d, -f2 "$out/loss_adam.csv") \
  <(cut -d, -f3 "$out/loss_muon.csv") <(cut -d, -f3 "$out/loss_adam.csv") |
  sed '1s/.*/step,muon_adamw,adamw,muon_adamw_seconds,adamw_seconds/' >"$out/loss_curves.csv"

# Steps and seconds to the same loss: each curve smoothed over 3 logged
# points (the loss jumps when a new episode starts); the headline target is
# the larger of the two best smoothed losses, a loss both reach; then the
# steps to a few decades of loss, to show where each optimizer is ahead.
awk -F, 'function first(curve, level,   i) {
    for (i = 1; i <= n; i++) if (curve[i] <= level) return i
    return 0
  }
  function show(label, level,   ia, ib) {
    ia = first(ma, level); ib = first(mb, level)
    printf "  %-22s %8s %8s", label, ia ? step[ia] : "-", ib ? step[ib] : "-"
    printf " %7s", ia && ib ? sprintf("%.2fx", step[ib] / step[ia]) : ""
    printf " %9s %9s", ia ? sprintf("%.1f", ta[ia]) : "-", ib ? sprintf("%.1f", tb[ib]) : "-"
    printf " %7s\n", (ia && ib && ta[ia] > 0) ? sprintf("%.2fx", tb[ib] / ta[ia]) : ""
  }
  NR > 1 { n++; step[n] = $1; a[n] = $2; b[n] = $3; ta[n] = $4; tb[n] = $5 }
  END {
    for (i = 1; i <= n; i++) {
      lo = i > 2 ? i - 2 : 1; sa = sb = 0
      for (j = lo; j <= i; j++) { sa += a[j]; sb += b[j] }
      ma[i] = sa / (i - lo + 1); mb[i] = sb / (i - lo + 1)
      if (i == 1 || ma[i] < best_a) best_a = ma[i]
      if (i == 1 || mb[i] < best_b) best_b = mb[i]
    }
    target = best_a > best_b ? best_a : best_b
    printf "\nto reach a loss (curves smoothed over 3 log points; - : not reached):\n"
    printf "  %-22s %17s %7s %19s %7s\n", "", "steps", "", "seconds", ""
    printf "  %-22s %8s %8s %7s %9s %9s %7s\n", "loss", "Muon", "AdamW", "AdamW/", "Muon", "AdamW", "AdamW/"
    printf "  %-22s %8s %8s %7s %9s %9s %7s\n", "", "+AdamW", "alone", "Muon", "+AdamW", "alone", "Muon"
    show(sprintf("%.3e (both reach)", target), target)
    for (level = 0.1; level > target; level /= sqrt(10)) show(sprintf("%.3e", level), level)
    # The score of examples/sweep_lr.sh: the mean over the last quarter of the run.
    k = int(n / 4); if (k < 1) k = 1
    for (i = n - k + 1; i <= n; i++) { qa += a[i]; qb += b[i] }
    printf "mean loss over the last quarter: Muon + AdamW %.3e, AdamW alone %.3e (%.2fx)\n", qa / k, qb / k,
      (qa > 0) ? qb / qa : 0
    printf "final loss: Muon + AdamW %.3e, AdamW alone %.3e; seconds per step: %.4f and %.4f\n", a[n], b[n],
      ta[n] / step[n], tb[n] / step[n]
  }' "$out/loss_curves.csv" | tee "$out/summary.txt"

gnuplot <<GP
set terminal pngcairo size 1200,520 enhanced font "sans,11"
set output "$out/loss_curves.png"
set datafile separator ","
set multiplot layout 1,2 title "Burgers surrogate trained online on $np ranks: relative loss (MSE / mean squared target)"
set logscale y
set grid
set key top right
set ylabel "relative loss"
set xlabel "training step"
plot "$out/loss_curves.csv" using 1:2 skip 1 with lines lw 2 title "Muon (hidden) + AdamW", \
     "$out/loss_curves.csv" using 1:3 skip 1 with lines lw 2 title "AdamW alone"
set xlabel "seconds (wall clock, this machine)"
plot "$out/loss_curves.csv" using 4:2 skip 1 with lines lw 2 title "Muon (hidden) + AdamW", \
     "$out/loss_curves.csv" using 5:3 skip 1 with lines lw 2 title "AdamW alone"
unset multiplot
GP
echo "wrote $out/loss_curves.csv and $out/loss_curves.png"
