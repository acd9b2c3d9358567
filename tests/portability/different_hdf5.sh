#!/usr/bin/env bash
# different_hdf5.sh TOOL_A TOOL_B: the HDF5 library each program loads (ldd),
# printed; fails unless the two differ.
set -euo pipefail
hdf5_of() {
  local lib
  lib=$(ldd "$1" | awk '/libhdf5[^ ]*\.so/ {print $3; exit}')
  if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    echo "$1 loads no HDF5 library (ldd)" >&2
    exit 1
  fi
  readlink -f "$lib"
}
a=$(hdf5_of "$1")
b=$(hdf5_of "$2")
echo "$1: $a"
echo "$2: $b"
if [ "$a" = "$b" ]; then
  echo "both load the same HDF5"
  exit 1
fi
