#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds the outside
# projects consumer_c (and consumer_fortran when Fortran is on) against it
# with find_package(DMuon CONFIG), and a C program through pkg-config, and
# runs each on 2 ranks. The consumers are configured with CUDA's packages
# disabled and must link no CUDA library, whether the install has the CUDA
# backend or not (it is loaded at run time); consumer_c runs on "cpu" and
# "auto", and, when the install has the CUDA backend, on "cuda" (the backend
# loads: it runs, or says no GPU is visible) and on "auto" once more with the
# backend's library unreachable (a node without the CUDA runtime): the CPU.
# The installed examples are built the same way and run on 2 ranks.
#   run_consumers.sh BUILD_DIR WORK_DIR HAS_FORTRAN MPIEXEC [C_COMPILER CXX_COMPILER Fortran_COMPILER]
set -euo pipefail
build=$1 work=$2 has_fortran=$3 mpiexec=$4
here=$(cd "$(dirname "$0")" && pwd)
compilers=()
[ -n "${5:-}" ] && compilers+=(-DCMAKE_C_COMPILER="$5")
[ -n "${6:-}" ] && compilers+=(-DCMAKE_CXX_COMPILER="$6")
[ -n "${7:-}" ] && compilers+=(-DCMAKE_Fortran_COMPILER="$7")
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
test -f "$prefix/lib/cmake/DMuon/DMuonConfig.cmake" || { echo "no DMuonConfig.cmake installed"; exit 1; }
# The package must name its dependencies by target (found again on the
# consumer's machine), not by this machine's library paths.
if grep -h "INTERFACE_LINK_LIBRARIES" "$prefix"/lib/cmake/DMuon/DMuonTargets*.cmake | grep -E '(^|[";])/[^";]*\.(so|a)([";]|$)'; then
  echo "the installed targets name libraries by absolute path (above)"
  exit 1
fi

has_cuda=OFF
grep -q "set(DMuon_HAS_CUDA ON)" "$prefix/lib/cmake/DMuon/DMuonConfig.cmake" && has_cuda=ON
if [ "$has_cuda" = ON ] && ! ls "$prefix"/lib/libdmuon_cuda.so.* >/dev/null 2>&1; then
  echo "the install has the CUDA backend (DMuon_HAS_CUDA) but no libdmuon_cuda.so"
  exit 1
fi
# No CUDA library in a program's needs: neither the consumer's nor libdmuon's.
no_cuda_needed() {
  if readelf -d "$1" | grep NEEDED | grep -Ei "libcuda|cublas|nccl"; then
    echo "$1 needs a CUDA library (above)"
    exit 1
  fi
}
for lib in "$prefix"/lib/libdmuon.so "$prefix"/lib/libdmuon_fortran.so; do
  [ -f "$lib" ] && no_cuda_needed "$lib"
done
no_cuda=(-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=TRUE)

consumers=(consumer_c)
[ "$has_fortran" = "ON" ] && consumers+=(consumer_fortran)
for c in "${consumers[@]}"; do
  echo "== $c: configure, build, run on 2 ranks"
  cmake -S "$here/$c" -B "$work/$c" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "${compilers[@]}" \
    "${no_cuda[@]}" >"$work/$c.configure.log" || { cat "$work/$c.configure.log"; exit 1; }
  cmake --build "$work/$c" --verbose >"$work/$c.build.log" || { cat "$work/$c.build.log"; exit 1; }
  if grep -Ei "cudart|cublas|nccl|libcuda\.|-lcuda\b|CUDA::" "$work/$c.build.log"; then
    echo "$c: CUDA on the build or link line (above)"
    exit 1
  fi
  no_cuda_needed "$work/$c/$c"
  "$mpiexec" -n 2 "$work/$c/$c" | tee "$work/$c.out"
  grep -q "on 2 ranks: OK" "$work/$c.out"
done

echo "== consumer_c on \"auto\" (the CPU backend without a GPU)"
"$mpiexec" -n 2 "$work/consumer_c/consumer_c" auto | tee "$work/consumer_c.auto.out"
grep -q "on 2 ranks: OK" "$work/consumer_c.auto.out"
if [ "$has_cuda" = ON ]; then
  # The installed libdmuon_cuda is found (the consumer's RUNPATH names the
  # install, not the build tree) and loaded: "cuda" runs on a GPU, or without
  # one says there is none (not that the backend is missing).
  echo "== consumer_c on \"cuda\" (loads the installed libdmuon_cuda)"
  "$mpiexec" -n 2 "$work/consumer_c/consumer_c" cuda >"$work/consumer_c.cuda.out" 2>&1 || true
  cat "$work/consumer_c.cuda.out"
  grep -qE "on 2 ranks: OK \(backend cuda\)|no usable GPU device is visible" "$work/consumer_c.cuda.out"
  echo "== consumer_c on \"auto\" with the CUDA backend's library unreachable"
  DMUON_CUDA_BACKEND=$work/nowhere/libdmuon_cuda.so "$mpiexec" -n 2 "$work/consumer_c/consumer_c" auto | tee "$work/consumer_c.nocuda.out"
  grep -q "on 2 ranks: OK (backend cpu)" "$work/consumer_c.nocuda.out"
fi
# The examples as installed (share/dmuon/examples), built on their own
# against the package: --help, then a short run on 2 ranks that trains and
# checkpoints its last step.
examples=$prefix/share/dmuon/examples
for f in CMakeLists.txt surrogate.cfg run_demo.sh sweep_lr.sh example_env.sh; do
  [ -f "$examples/$f" ] || { echo "no $f under $examples"; exit 1; }
done
[ -x "$prefix/share/dmuon/jobscripts/cpu_job.sh" ] || { echo "no job scripts under $prefix/share/dmuon/jobscripts"; exit 1; }
echo "== the installed examples: configure, build, run on 2 ranks"
cmake -S "$examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" "${compilers[@]}" >"$work/examples.configure.log" ||
  { cat "$work/examples.configure.log"; exit 1; }
cmake --build "$work/examples" >"$work/examples.build.log" || { cat "$work/examples.build.log"; exit 1; }
programs=(burgers_surrogate_c)
[ "$has_fortran" = "ON" ] && programs+=(burgers_surrogate_f)
for p in "${programs[@]}"; do
  (cd "$work/examples" && "$mpiexec" -n 2 "./$p" --config="$examples/surrogate.cfg" --help) >"$work/$p.help" ||
    { cat "$work/$p.help"; exit 1; }
  grep -q -- "--steps=1500 " "$work/$p.help" || { echo "$p --help shows no defaults:"; cat "$work/$p.help"; exit 1; }
  (cd "$work/examples" && "$mpiexec" -n 2 "./$p" --config="$examples/surrogate.cfg" --backend=cpu --steps=20 \
    --log_every=10 --restart=0 --checkpoint_dir="ck_$p" --loss_csv="$p.csv") | tee "$work/$p.out"
  if ! grep -q "^step  *20 " "$work/$p.out" || ! grep -q "checkpoint at step 20 " "$work/$p.out"; then
    echo "$p from the installed examples did not train and checkpoint"
    exit 1
  fi
done

if command -v pkg-config >/dev/null && command -v mpicc >/dev/null; then
  echo "== consumer_c through pkg-config (static libdmuon: --static)"
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  if pkg-config --static --libs dmuon | grep -Ei "cudart|cublas|nccl|-lcuda\b"; then
    echo "dmuon.pc puts CUDA on the link line (above)"
    exit 1
  fi
  # shellcheck disable=SC2046  # the flags are meant to split
  mpicc -o "$work/consumer_pc" "$here/consumer_c/main.c" $(pkg-config --static --cflags --libs dmuon)
  "$mpiexec" -n 2 "$work/consumer_pc" | tee "$work/consumer_pc.out"
  grep -q "on 2 ranks: OK" "$work/consumer_pc.out"
fi
echo "install test passed"
