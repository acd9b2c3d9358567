#!/usr/bin/env bash
# The C and Fortran examples are one model on one data stream: their logged
# losses agree to within float rounding (the Fortran module's views, shape
# convention and options carry the same training as the C API).
#   examples_agree.sh C_EXE FORTRAN_EXE CONFIG WORK_DIR MPIEXEC
set -euo pipefail
c_exe=$1 f_exe=$2 config=$3 work=$4 mpiexec=$5
rm -rf "$work"
mkdir -p "$work"
cd "$work"
common=(--config="$config" --steps=100 --log_every=20 --checkpoint_every=0 --restart=0 --backend=cpu)
"$mpiexec" -n 2 "$c_exe" "${common[@]}" --loss_csv=c.csv --checkpoint_dir=ck_c >c.out
"$mpiexec" -n 2 "$f_exe" "${common[@]}" --loss_csv=f.csv --checkpoint_dir=ck_f >f.out
paste -d, c.csv f.csv | awk -F, 'NR > 1 {
    rel = ($2 - $5) / $2; if (rel < 0) rel = -rel
    printf "step %s: C %s  Fortran %s  relative difference %.1e\n", $1, $2, $5, rel
    if ($1 != $4 || rel > 1e-3) bad = 1; n++
  }
  END { exit (bad || n != 5) }'
