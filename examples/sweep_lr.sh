#!/usr/bin/env bash
# The learning-rate sweep behind the demo's settings (docs/examples.md shows
# its last result). First AdamW alone over --adam LRS; the best AdamW rate
# then serves the AdamW part of Muon + AdamW (the first and last layers and
# the biases), and Muon's rate is swept over --muon LRS. Each run is the C
# example on the demo's problem from the same initial weights and data;
# "best" is the lowest mean loss over the last quarter of the run.
#
#   examples/sweep_lr.sh [BUILD_DIR] [--np N] [--out DIR] [--adam "LRS"] [--muon "LRS"] [--example-option=value ...]
#
# BUILD_DIR defaults to ./build, DIR to BUILD_DIR/sweep; the example options
# (for example the demo's --hidden=128 --layers=4, or --steps=1000) go to every run.
# Writes DIR/sweep.csv (optimizer,muon_lr,adam_lr,end_loss,seconds) and prints it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
np=2
out=$build/sweep
adam_rates="0.001 0.003 0.01"
muon_rates="0.005 0.01 0.02 0.04"
while [ $# -ge 2 ]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --adam) adam_rates=$2; shift 2 ;;
    --muon) muon_rates=$2; shift 2 ;;
    *) break ;;
  esac
done
# shellcheck source=examples/example_env.sh
source "$here/example_env.sh"
example_env "$build" sweep_lr.sh
mkdir -p "$out"

# end_loss CSV: the mean logged loss over the last quarter of the run (one
# episode's loss is noisy; a quarter spans many episodes).
end_loss() {
  awk -F, 'NR > 1 { n++; loss[n] = $2 } END { k = int(n / 4); if (k < 1) k = 1
    for (i = n - k + 1; i <= n; i++) s += loss[i]; printf "%.4e", s / k }' "$1"
}

run() {  # run OPTIMIZER MUON_LR ADAM_LR [example options]: one row of sweep.csv (MUON_LR - : none)
  local name=$1_m$2_a$3 rates=(--adam_lr="$3")
  [ "$2" = - ] || rates+=(--muon_lr="$2")
  rm -rf "$out/ck_$name"
  "$mpiexec" -n "$np" "$exe" --config "$here/surrogate.cfg" --optimizer="$1" "${rates[@]}" --restart=0 --checkpoint_every=0 --loss_csv="$out/loss_$name.csv" --checkpoint_dir="$out/ck_$name" "${@:4}" \
    >"$out/$name.out"
  rm -rf "$out/ck_$name"
  printf '%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$(end_loss "$out/loss_$name.csv")" \
    "$(tail -n 1 "$out/loss_$name.csv" | cut -d, -f3)" | tee -a "$out/sweep.csv"
}

echo "optimizer,muon_lr,adam_lr,end_loss,seconds" | tee "$out/sweep.csv"
for a in $adam_rates; do run adam - "$a" "$@"; done
best_adam=$(awk -F, '$1 == "adam"' "$out/sweep.csv" | sort -t, -k4 -g | head -n 1 | cut -d, -f3)
for m in $muon_rates; do run muon "$m" "$best_adam" "$@"; done
best_muon=$(awk -F, '$1 == "muon"' "$out/sweep.csv" | sort -t, -k4 -g | head -n 1 | cut -d, -f2)
echo "best: AdamW alone --adam_lr=$best_adam; Muon + AdamW --muon_lr=$best_muon --adam_lr=$best_adam"
