# Hardening tests (issue 5): a rank dying inside a step, non-finite gradients,
# determinism, the bad-input matrix. Included by tests/CMakeLists.txt.

# --- A rank dies during a step (CPU/MPI path) --------------------------------
# Open MPI kills every rank when one dies unless orte_enable_recovery is set
# (seen with 4.1.4: `--mca orte_abort_on_non_zero_status 0` alone still killed
# the survivors). With it, mpirun's exit status is 0 whatever the ranks return,
# so each survivor writes a verdict file and a second test judges the files.
add_executable(die_in_step hardening/die_in_step.cpp hardening/die_inject.cpp)
target_link_libraries(die_in_step PRIVATE dmuon MPI::MPI_CXX)
target_include_directories(die_in_step PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# The test's MPI_* definitions must win over libmpi's for a shared libdmuon too.
set_target_properties(die_in_step PROPERTIES ENABLE_EXPORTS ON)

# The Fortran twin: the status reaches a Fortran caller's ierr.
if(DMuon_HAS_FORTRAN)
  add_executable(die_in_step_f hardening/die_in_step_f.F90 hardening/die_inject.cpp)
  target_link_libraries(die_in_step_f PRIVATE DMuon::dmuon_fortran MPI::MPI_Fortran MPI::MPI_CXX)
  set_target_properties(die_in_step_f PROPERTIES ENABLE_EXPORTS ON LINKER_LANGUAGE Fortran
                        Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fmod/die_in_step_f)
endif()

set(dmuon_die_timeout_ms 1500)
# dmuon_add_die_test(<name> <exe> <point>): the run (3 ranks, rank 1 dies) and its judge.
function(dmuon_add_die_test name exe point)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/hardening/${name})
  file(MAKE_DIRECTORY ${dir})
  dmuon_add_mpi_test(NAME ${name} COMMAND ${exe} ${point} ${dir} 1 ${dmuon_die_timeout_ms} NPROCS 3 LABELS hardening)
  set_tests_properties(${name}_np3 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};OMPI_MCA_orte_enable_recovery=1"
                       TIMEOUT 60 FIXTURES_SETUP ${name})
  add_test(NAME ${name}_verdict COMMAND ${CMAKE_COMMAND} -DDIR=${dir} -DNPROCS=3 -DVICTIM=1
                                        -P ${CMAKE_CURRENT_SOURCE_DIR}/hardening/check_verdicts.cmake)
  set_tests_properties(${name}_verdict PROPERTIES FIXTURES_REQUIRED ${name} LABELS hardening)
endfunction()
foreach(point adam_allreduce muon_reduce_scatter grad_norm muon_allgather)
  dmuon_add_die_test(die_in_${point} die_in_step ${point})
endforeach()
if(DMuon_HAS_FORTRAN)
  foreach(point adam_allreduce muon_allgather)
    dmuon_add_die_test(die_f_in_${point} die_in_step_f ${point})
  endforeach()
endif()

# The watchdog path against the blocking one, and a rank later than the timeout.
dmuon_add_gtest(test_timeout_path SOURCES hardening/test_timeout_path.cpp NPROCS 1 2 3 LABELS hardening)

# Non-finite gradients over the whole state (test_muon covers the Muon side).
dmuon_add_gtest(test_nonfinite SOURCES hardening/test_nonfinite.cpp NPROCS 1 3 LABELS hardening)

# Determinism: two runs (separate processes) with the same inputs and rank
# count give the same state and the same checkpoint datasets and attributes.
add_executable(determinism hardening/determinism.cpp)
target_link_libraries(determinism PRIVATE dmuon_test_support ${HDF5_C_LIBRARIES})
target_include_directories(determinism PRIVATE ${PROJECT_SOURCE_DIR}/hdf5_io ${HDF5_INCLUDE_DIRS})
target_compile_definitions(determinism PRIVATE ${HDF5_C_DEFINITIONS})
set(dmuon_det_steps 6)
foreach(n 2 3)
  set(det_dir ${CMAKE_CURRENT_BINARY_DIR}/hardening/determinism_np${n})
  foreach(run a b)
    file(MAKE_DIRECTORY ${det_dir}/${run})
    dmuon_add_mpi_test(NAME determinism_${run} COMMAND determinism run ${det_dir}/${run} ${dmuon_det_steps}
                       NPROCS ${n} LABELS hardening PROPERTIES FIXTURES_SETUP determinism_np${n})
  endforeach()
  add_test(NAME determinism_compare_np${n}
           COMMAND determinism compare ${det_dir}/a ${det_dir}/b ${n} ${dmuon_det_steps})
  set_tests_properties(determinism_compare_np${n} PROPERTIES FIXTURES_REQUIRED determinism_np${n}
                       LABELS hardening ENVIRONMENT "${DMUON_TEST_ENV}")
endforeach()

# The bad-input matrix over every public C function (docs/errors.md).
dmuon_add_gtest(test_bad_input SOURCES hardening/test_bad_input.cpp NPROCS 1 LABELS hardening)
