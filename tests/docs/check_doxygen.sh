#!/bin/sh
# The C API reference (docs/Doxyfile) in the build tree.
#   check_doxygen.sh build DOXYGEN SOURCE_DIR OUT   builds it; fails on any warning
#   check_doxygen.sh bites DOXYGEN SOURCE_DIR OUT   adds an undocumented function to a
#       copy of dmuon.h and checks that the same configuration refuses it
set -u
mode=$1 doxygen=$2 src=$3 out=$4
rm -rf "$out" && mkdir -p "$out" || exit 1
cd "$src" || exit 1
case $mode in
build)
  { cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; } | "$doxygen" - || exit 1
  # The page of the header must exist and name every function of the ABI.
  page=$out/html/dmuon_8h.html
  test -s "$page" || { echo "no $page"; exit 1; }
  missing=0
  for f in $(sed -n 's/^[a-z].*[ *]\(dmuon_[a-z0-9_]*\)(.*/\1/p' include/dmuon/dmuon.h); do
    grep -q "$f" "$page" || { echo "$f is not in the reference"; missing=1; }
  done
  exit $missing ;;
bites)
  mkdir -p "$out/in/dmuon" && cp include/dmuon/dmuon.h "$out/in/dmuon/" || exit 1
  printf 'int dmuon_undocumented_probe(int x);\n' >> "$out/in/dmuon/dmuon.h"
  if { cat docs/Doxyfile; echo "INPUT = $out/in/dmuon"; echo "OUTPUT_DIRECTORY = $out/out"; } |
       "$doxygen" - > "$out/log" 2>&1; then
    echo "doxygen accepted an undocumented function:"; cat "$out/log"; exit 1
  fi
  grep "dmuon_undocumented_probe.*not documented" "$out/log" || { cat "$out/log"; exit 1; } ;;
*) echo "usage: $0 build|bites DOXYGEN SOURCE_DIR OUT"; exit 2 ;;
esac
