# Contracts a user cannot break by accident (issue 19): handle lifetimes in
# any destroy order, sizes at the edges of 64-bit arithmetic. Included by
# tests/CMakeLists.txt; the _np1/_np2 runs are also part of scripts/sanitize.sh.
dmuon_add_gtest(test_lifetime SOURCES unit/test_lifetime.cpp NPROCS 1 2 LABELS unit)
dmuon_add_gtest(test_sizes SOURCES unit/test_sizes.cpp NPROCS 1 2 LABELS unit)
# Views across a restore (same plan: same addresses; re-plan: dmuon_views_epoch), dmuon.fallback.
add_executable(test_restore_views checkpoint/test_restore_views.cpp support/mpi_gtest_main.cpp)
target_link_libraries(test_restore_views PRIVATE dmuon_ckpt_test_support GTest::gtest)
dmuon_add_mpi_test(NAME test_restore_views COMMAND test_restore_views NPROCS 1 2 LABELS checkpoint)
# Replicated parameters: dmuon_check_replicas, the check before a save, dmuon_broadcast_params.
dmuon_add_gtest(test_replicas SOURCES mpi/test_replicas.cpp NPROCS 2 3 LABELS unit)
# The Fortran side: options type against the C defaults, destroy orders and
# finalizers, views across a restore, replicas.
if(DMuon_HAS_FORTRAN)
  add_executable(test_f_contracts fortran/test_f_contracts.F90 fortran/options_compare.c)
  target_link_libraries(test_f_contracts PRIVATE dmuon_ftest DMuon::dmuon_fortran)
  set_target_properties(test_f_contracts PROPERTIES Fortran_PREPROCESS ON LINKER_LANGUAGE Fortran
                        Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fmod/test_f_contracts)
  set(contracts_dir ${CMAKE_CURRENT_BINARY_DIR}/fortran_checkpoints/contracts)
  dmuon_add_mpi_test(NAME fortran_contracts COMMAND test_f_contracts ${contracts_dir} NPROCS 1 2 LABELS fortran)
endif()
