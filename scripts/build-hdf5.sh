#!/usr/bin/env bash
# Builds parallel HDF5 1.14.5 (the C library only: no tools, no Fortran, no
# C++, no high-level library, no tests) against the system OpenMPI into a
# cache directory, and prints that directory. A finished build there is
# reused. The sources are Debian 13 (trixie)'s, from the same registry as the
# system's Debian 12 packages (a deb-src line is added beside them).
#   scripts/build-hdf5.sh [PREFIX]     default PREFIX: /var/cache/dmuon/hdf5-1.14.5
set -euo pipefail
version=1.14.5
debian_version=1.14.5+repack-3
prefix=${1:-/var/cache/dmuon/hdf5-$version}
stamp=$prefix/.dmuon-built
if [ -f "$stamp" ] && [ -x "$prefix/bin/h5pcc" ]; then
  echo "$prefix"
  exit 0
fi

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
# The registry and keyring the system's own sources use (debian.sources).
sources=/etc/apt/sources.list.d/dmuon-trixie-src.sources
if [ ! -f "$sources" ]; then
  # The first archive the system's sources name (deb822 or one-line format).
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" {for (i = 2; i <= NF; ++i) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
                           /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "build-hdf5.sh: no Debian archive found in the apt sources" >&2; exit 1; }
  printf '%s\n' "Types: deb-src" "URIs: $uri" "Suites: trixie" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | "${sudo_cmd[@]}" tee "$sources" >/dev/null
fi
if ! apt-cache showsrc hdf5 2>/dev/null | grep -q "^Version: $debian_version$"; then
  "${sudo_cmd[@]}" apt-get update -qq >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source --download-only -qq "hdf5=$debian_version" >&2)
# The upstream tree as released (Debian's repack drops only non-free files);
# Debian's patches concern its packaging and are not applied.
tar -C "$work" -xzf "$work/hdf5_${version}+repack.orig.tar.gz"
src=$work/hdf5-${version}+repack
# Library-only build; MPI through the wrapper compiler, as HDF5 documents.
# Its configure and compiler output go to stderr: stdout is the prefix alone.
(cd "$src" && CC=mpicc ./configure --prefix="$prefix" --enable-parallel --enable-shared --disable-static \
   --disable-fortran --disable-cxx --disable-hl --disable-tools --disable-tests \
   --without-zlib --without-szlib --disable-doxygen-doc >&2 &&
   make -j "$(nproc)" >&2 && make install >&2)
touch "$stamp"
echo "$prefix"
