#!/bin/sh
# Pages that list the API must not drift from include/dmuon/dmuon.h.
#   check_listed.sh functions DMUON_H PAGE   every function of the header is named in PAGE
#   check_listed.sh statuses DMUON_H PAGE    every DMUON_STATUS_LIST entry has a table row
#                                            "| `NAME` | VALUE |" in PAGE, and no other code does
#   check_listed.sh polar-express NS_CPP PAGE  the Polar Express rows of src/core/newton_schulz.cpp
#                                            are the table rows of PAGE, digit for digit
#   check_listed.sh fortran-statuses DMUON_H INC   every DMUON_STATUS_LIST entry is a Fortran
#                                            constant "NAME = VALUE" in INC (generated for the module)
set -u
mode=$1 header=$2 page=$3
status=0
case $mode in
functions)
  names=$(sed -n 's/^[a-z].*[ *]\(dmuon_[a-z0-9_]*\)(.*/\1/p' "$header")
  [ -n "$names" ] || { echo "no function found in $header"; exit 1; }
  n=0
  for f in $names; do
    n=$((n + 1))
    grep -q "\`$f\`" "$page" || { echo "$page does not list $f"; status=1; }
  done
  [ $status -eq 0 ] && echo "$n functions, all listed in $page" ;;
statuses)
  entries=$(sed -n 's/.*X(\(DMUON_[A-Z0-9_]*\), \([0-9]*\),.*/\1:\2/p' "$header")
  [ -n "$entries" ] || { echo "no status list found in $header"; exit 1; }
  n=0
  for e in $entries; do
    n=$((n + 1))
    name=${e%%:*} value=${e##*:}
    grep -q "^| \`$name\` | $value |" "$page" || { echo "$page: no row '| \`$name\` | $value |'"; status=1; }
  done
  for name in $(grep -o '^| `DMUON_[A-Z0-9_]*` |' "$page" | tr -d '|` '); do
    echo "$entries" | grep -q "^$name:" || { echo "$page: $name is not in DMUON_STATUS_LIST"; status=1; }
  done
  [ $status -eq 0 ] && echo "$n status codes, each with its value in $page" ;;
fortran-statuses)
  entries=$(sed -n 's/.*X(\(DMUON_[A-Z0-9_]*\), \([0-9]*\),.*/\1:\2/p' "$header")
  [ -n "$entries" ] || { echo "no status list found in $header"; exit 1; }
  [ -s "$page" ] || { echo "$page is missing: build dmuon_fortran first"; exit 1; }
  n=0
  for e in $entries; do
    n=$((n + 1))
    name=${e%%:*} value=${e##*:}
    grep -qi "parameter.*:: *$name *= *$value *\$" "$page" || { echo "$page: no constant $name = $value"; status=1; }
  done
  [ $status -eq 0 ] && echo "$n status codes, each a Fortran constant with its value" ;;
polar-express)
  code=$(sed -n 's/^ *{\(-\{0,1\}[0-9][0-9.]*\), \(-\{0,1\}[0-9][0-9.]*\), \(-\{0,1\}[0-9][0-9.]*\)},*$/\1 \2 \3/p' "$header")
  table=$(sed -n 's/^| [0-9][0-9a-z ]* | \(-\{0,1\}[0-9][0-9.]*\) | \(-\{0,1\}[0-9][0-9.]*\) | \(-\{0,1\}[0-9][0-9.]*\) |$/\1 \2 \3/p' "$page")
  [ -n "$code" ] || { echo "no coefficient rows found in $header"; exit 1; }
  if [ "$code" != "$table" ]; then
    printf 'the Polar Express table of %s differs from %s:\n--- code\n%s\n--- page\n%s\n' "$page" "$header" "$code" "$table"
    exit 1
  fi
  quintic=$(sed -n 's/.*NsCoefficients{\(-\{0,1\}[0-9.]*\)f, \(-\{0,1\}[0-9.]*\)f, \(-\{0,1\}[0-9.]*\)f}.*/(\1, \2, \3)/p' "$header")
  [ -n "$quintic" ] || { echo "no quintic coefficients found in $header"; exit 1; }
  grep -qF "\`(a, b, c) = $quintic\`" "$page" || { echo "$page does not give the quintic coefficients $quintic"; exit 1; }
  echo "$(echo "$code" | wc -l) Polar Express rows and the quintic $quintic, the same in $page" ;;
*) echo "usage: $0 functions|statuses|polar-express|fortran-statuses FILE FILE"; exit 2 ;;
esac
exit $status
