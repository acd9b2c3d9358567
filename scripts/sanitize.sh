#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer: builds the `sanitize` preset
# (CPU backend, RelWithDebInfo, -fsanitize=address,undefined, UB is fatal) and
# runs the CPU tests at 1 and 2 ranks under it. Any ASan report, any UB, or
# any leak that is not MPI's own (tests/sanitizers/lsan.supp) fails a test.
#   scripts/sanitize.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${DMUON_JOBS:-2}

cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"

# fast_unwind_on_malloc=0: full allocation stacks through MPI's libraries
# (built without frame pointers), so that the suppressions can match them.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:strict_init_order=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# The fast CPU tests at 1 and 2 ranks (names end in _np1/_np2) of the library's
# own labels. Left out, to fit CI's budget (ASan with full malloc stacks is
# slow): the checkpoint resume/crash chains (their fixtures pull in saves at 3
# to 5 ranks; test_checkpoint_integrity and the fuzzer cover restore under
# ASan), docs snippets and Fortran wrappers; the preset already leaves out gpu,
# slurm, install and bench. Also left out: test_replan, which provokes a failed
# allocation by lowering RLIMIT_AS; ASan reserves terabytes of shadow address
# space and its own allocator aborts under such a limit, so the test cannot
# mean anything there (it runs in the normal suite).
ctest --preset sanitize -R '_np[12]$' -L 'unit|adam|muon|hardening|checkpoint' -E 'checkpoint_resume|checkpoint_crash|test_replan' "$@"
