# Shell scripts (label lint): `bash -n` and shellcheck over the job scripts,
# the helper scripts, CI's entry point, the examples' scripts and the slurm
# and install tests' scripts. The file
# lists are globbed when the test runs, so a new script is checked without
# re-running CMake. shellcheck runs from the top of the tree, where the
# `# shellcheck source=` paths of the scripts are rooted.
set(dmuon_lint_scripts
    "jobscripts/*.sh jobscripts/lib/*.sh scripts/*.sh .ci/run tests/slurm/*.sh examples/*.sh tests/install/*.sh")

add_test(NAME lint_bash_syntax
         COMMAND bash -c "status=0; for f in ${dmuon_lint_scripts}; do bash -n \"$f\" || { echo \"bash -n failed: $f\"; status=1; }; done; exit $status"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

find_program(SHELLCHECK_EXECUTABLE shellcheck)
if(SHELLCHECK_EXECUTABLE)
  add_test(NAME lint_shellcheck
           COMMAND bash -c "\"${SHELLCHECK_EXECUTABLE}\" --external-sources ${dmuon_lint_scripts}"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
else()
  # Missing shellcheck is a failure, not a pass: CI installs it (apt-get install shellcheck).
  add_test(NAME lint_shellcheck
           COMMAND bash -c "echo 'shellcheck not found when CMake ran: apt-get install shellcheck, then re-run cmake' >&2; exit 1")
endif()
set_tests_properties(lint_bash_syntax lint_shellcheck PROPERTIES LABELS lint TIMEOUT 120)

# Every kernel under src/ starts with await_prerequisite_kernels(): the replayed
# graphs make the edges into dmuon's kernels programmatic (docs/decisions.md,
# "Programmatic edges into kernels that wait"), so one that read first would race.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME lint_kernels_wait COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/lint/kernels_wait.py
                                          ${PROJECT_SOURCE_DIR})
else()
  add_test(NAME lint_kernels_wait COMMAND bash -c "echo 'python3 not found when CMake ran' >&2; exit 1")
endif()
set_tests_properties(lint_kernels_wait PROPERTIES LABELS lint TIMEOUT 60)
