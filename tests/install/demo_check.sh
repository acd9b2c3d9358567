#!/usr/bin/env bash
# The README's demo, short: both runs happen, the summary names the steps
# each needs, the CSV holds both curves and the image is a PNG.
#   demo_check.sh SOURCE_DIR BUILD_DIR OUT_DIR
set -euo pipefail
src=$1 build=$2 out=$3
rm -rf "$out"
"$src/examples/run_demo.sh" "$build" --out "$out" --steps=150 --log_every=25 --checkpoint_every=0
# the headline: the steps of each run to a loss both reach
grep -Eq '\(both reach\) +[0-9]+ +[0-9]+ ' "$out/summary.txt" || { cat "$out/summary.txt"; exit 1; }
head -n 1 "$out/loss_curves.csv" | grep -qx "step,muon_adamw,adamw,muon_adamw_seconds,adamw_seconds"
# 150 steps logged every 25: six rows, each with two positive losses
rows=$(awk -F, 'NR > 1 && $2 > 0 && $3 > 0' "$out/loss_curves.csv" | wc -l)
[ "$rows" -eq 6 ] || { echo "expected 6 rows with both losses, found $rows"; cat "$out/loss_curves.csv"; exit 1; }
# PNG signature: \x89 P N G
[ "$(head -c 4 "$out/loss_curves.png" | od -An -tx1 | tr -d ' \n')" = 89504e47 ] || { echo "not a PNG"; exit 1; }
echo "demo check passed"
