# Contracts a user cannot break by accident (issue 19): handle lifetimes in
# any destroy order, sizes at the edges of 64-bit arithmetic. Included by
# tests/CMakeLists.txt; the _np1/_np2 runs are also part of scripts/sanitize.sh.
dmuon_add_gtest(test_lifetime SOURCES unit/test_lifetime.cpp NPROCS 1 2 LABELS unit)
dmuon_add_gtest(test_sizes SOURCES unit/test_sizes.cpp NPROCS 1 2 LABELS unit)
