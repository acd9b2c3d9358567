# shellcheck shell=bash
# Shared by run_demo.sh and sweep_lr.sh (sourced): the example program of a
# build and the MPI launcher that build found.
#   example_env BUILD_DIR SCRIPT_NAME   sets exe and mpiexec, or exits 1

example_env() {
  # The build of dmuon's tree, or of the installed examples on their own.
  exe=$1/examples/burgers_surrogate_c
  [ -x "$exe" ] || exe=$1/burgers_surrogate_c
  [ -x "$exe" ] || { echo "$2: no burgers_surrogate_c in $1 or $1/examples: build first" >&2; exit 1; }
  mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$1/CMakeCache.txt" 2>/dev/null || true)
  mpiexec=${mpiexec:-mpiexec}
  # Open MPI wants to be told about root and about more ranks than cores.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
}
