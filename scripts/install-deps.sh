#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages dmuon needs that are not installed yet.
# Runs apt-get only when something is missing (as root, or through sudo).
set -euo pipefail
# Build and run: compilers, MPI, parallel HDF5, BLAS, Boost; the demo's plot: gnuplot.
# Tests: GoogleTest, h5dump, h5py (an independent checkpoint reader), doxygen
# (the API reference), shellcheck (the job scripts).
packages=(build-essential cmake gfortran pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
          libboost-program-options-dev libopenblas-dev gnuplot-nox
          libgtest-dev python3-h5py python3-numpy doxygen shellcheck)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
