# Checkpoint tests (hdf5_io): save on N ranks and restore on M, crash in the
# middle of a save, damaged files, another model, h5dump. Every test writes
# under the build tree (its working directory), never in the source tree.
set(ckpt_dir ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_data)
file(MAKE_DIRECTORY ${ckpt_dir})

add_library(dmuon_ckpt_test_support STATIC checkpoint/h5_inspect.cpp support/reference.cpp)
target_include_directories(dmuon_ckpt_test_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src
                           ${PROJECT_SOURCE_DIR}/hdf5_io ${HDF5_INCLUDE_DIRS})
target_compile_definitions(dmuon_ckpt_test_support PUBLIC ${HDF5_C_DEFINITIONS})
target_link_libraries(dmuon_ckpt_test_support PUBLIC dmuon MPI::MPI_CXX ${HDF5_C_LIBRARIES})

add_executable(ckpt_tool checkpoint/ckpt_tool.cpp)
target_link_libraries(ckpt_tool PRIVATE dmuon_ckpt_test_support)

# Save on N, restore on M, continue K steps, compare bitwise with an uninterrupted run.
set(ckpt_steps 5)
set(ckpt_more 3)
foreach(pair IN ITEMS 2:1 1:4 4:2 3:2 2:5 2:2)
  string(REPLACE ":" ";" nm ${pair})
  list(GET nm 0 n)
  list(GET nm 1 m)
  set(case checkpoint_resume_${n}to${m})
  dmuon_add_mpi_test(NAME ${case}_save COMMAND ckpt_tool save ${ckpt_dir}/${n}to${m} ${ckpt_steps} NPROCS ${n}
                     LABELS checkpoint PROPERTIES FIXTURES_SETUP ${case})
  dmuon_add_mpi_test(NAME ${case}_restore COMMAND ckpt_tool resume ${ckpt_dir}/${n}to${m} ${ckpt_steps} ${ckpt_more} ${n}
                     NPROCS ${m} LABELS checkpoint PROPERTIES FIXTURES_REQUIRED ${case} RESOURCE_LOCK ${case})
  # Ranks on one node copy the replicated datasets from the page cache; across nodes they
  # all-gather them. The same restore again, through the all-gather (options.restore_gather = 1;
  # it re-saves in the same place).
  if(m GREATER 1)
    dmuon_add_mpi_test(NAME ${case}_restore_gather COMMAND ckpt_tool resume-gather ${ckpt_dir}/${n}to${m} ${ckpt_steps}
                       ${ckpt_more} ${n} NPROCS ${m} LABELS checkpoint
                       PROPERTIES FIXTURES_REQUIRED ${case} RESOURCE_LOCK ${case})
  endif()
endforeach()

# A rank is SIGKILLed in the middle of a save (test-only fault point); then
# `latest` still restores the previous checkpoint.
set(crash_dir ${ckpt_dir}/crash)
dmuon_add_mpi_test(NAME checkpoint_crash_prepare COMMAND ckpt_tool crash-prepare ${crash_dir} 4 NPROCS 2
                   LABELS checkpoint PROPERTIES FIXTURES_SETUP checkpoint_crash_prepared)
dmuon_add_mpi_test(NAME checkpoint_crash_kill COMMAND ckpt_tool crash ${crash_dir} 4 2 NPROCS 2 LABELS checkpoint
                   PROPERTIES WILL_FAIL TRUE TIMEOUT 120 FIXTURES_REQUIRED checkpoint_crash_prepared
                              FIXTURES_SETUP checkpoint_crash_killed)
set_tests_properties(checkpoint_crash_kill_np2 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};DMUON_FAULT_POINT=save-kill@1")
dmuon_add_mpi_test(NAME checkpoint_crash_verify COMMAND ckpt_tool crash-verify ${crash_dir} 4 2 NPROCS 3
                   LABELS checkpoint)
set_tests_properties(checkpoint_crash_verify_np3 PROPERTIES FIXTURES_REQUIRED "checkpoint_crash_prepared;checkpoint_crash_killed")

# h5dump reads a checkpoint and shows the fletcher32 filter.
find_program(H5DUMP_EXECUTABLE h5dump)
if(H5DUMP_EXECUTABLE)
  add_test(NAME checkpoint_h5dump COMMAND ${H5DUMP_EXECUTABLE} -p -H ${ckpt_dir}/2to1/ckpt_${ckpt_steps}.h5)
  set_tests_properties(checkpoint_h5dump PROPERTIES LABELS checkpoint FIXTURES_REQUIRED checkpoint_resume_2to1
                       PASS_REGULAR_EXPRESSION "CHECKSUM FLETCHER32")
endif()

# GoogleTest programs (every rank runs every test).
foreach(t IN ITEMS test_checkpoint_integrity:2 test_checkpoint_mismatch:2 test_checkpoint_seal:2 test_direct_chunks:2
               test_crc32c:1 test_read_plan:1)
  string(REPLACE ":" ";" tn ${t})
  list(GET tn 0 name)
  list(GET tn 1 np)
  add_executable(${name} checkpoint/${name}.cpp support/mpi_gtest_main.cpp)
  target_link_libraries(${name} PRIVATE dmuon_ckpt_test_support GTest::gtest)
  dmuon_add_mpi_test(NAME ${name} COMMAND ${name} NPROCS ${np} LABELS checkpoint)
endforeach()
# The fuzzer's saved inputs, each of which the whole-file seal must refuse.
target_compile_definitions(test_checkpoint_seal PRIVATE DMUON_FUZZ_REGRESSIONS="${PROJECT_SOURCE_DIR}/fuzz/regressions")

# An independent Python reader (h5py) written from docs/checkpoint-format.md; skipped (77) where
# no python3 with h5py is found.
add_test(NAME checkpoint_h5py_reader
         COMMAND sh -c "for p in python3 /usr/bin/python3; do $p -c 'import h5py' 2>/dev/null && exec $p \"$0\" \"$1\"; done; exit 77"
                 ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/read_checkpoint.py ${ckpt_dir}/3to2/ckpt_${ckpt_steps}.h5)
set_tests_properties(checkpoint_h5py_reader PROPERTIES LABELS checkpoint SKIP_RETURN_CODE 77
                     FIXTURES_REQUIRED checkpoint_resume_3to2)

# Rank 0 dies after the rename, before `latest` moves: `latest` still wins, the new file is whole.
set(crash2_dir ${ckpt_dir}/crash_before_latest)
dmuon_add_mpi_test(NAME checkpoint_crash2_prepare COMMAND ckpt_tool crash-prepare ${crash2_dir} 3 NPROCS 2
                   LABELS checkpoint PROPERTIES FIXTURES_SETUP checkpoint_crash2_prepared)
dmuon_add_mpi_test(NAME checkpoint_crash2_kill COMMAND ckpt_tool crash ${crash2_dir} 3 2 NPROCS 2 LABELS checkpoint
                   PROPERTIES WILL_FAIL TRUE TIMEOUT 120 FIXTURES_REQUIRED checkpoint_crash2_prepared
                              FIXTURES_SETUP checkpoint_crash2_killed)
set_tests_properties(checkpoint_crash2_kill_np2 PROPERTIES
                     ENVIRONMENT "${DMUON_TEST_ENV};DMUON_FAULT_POINT=save-kill-before-latest@0")
dmuon_add_mpi_test(NAME checkpoint_crash2_verify COMMAND ckpt_tool crash-verify-renamed ${crash2_dir} 3 2 NPROCS 1
                   LABELS checkpoint)
set_tests_properties(checkpoint_crash2_verify_np1 PROPERTIES
                     FIXTURES_REQUIRED "checkpoint_crash2_prepared;checkpoint_crash2_killed")

# The installed checkpoint tool (hdf5_io/tool): list, verify, diff, export.
add_test(NAME checkpoint_dmuon_ckpt_tool
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/dmuon_ckpt_test.sh $<TARGET_FILE:dmuon_ckpt>
                 $<TARGET_FILE:ckpt_tool> ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/dmuon_ckpt_tool)
set_tests_properties(checkpoint_dmuon_ckpt_tool PROPERTIES LABELS checkpoint ENVIRONMENT "${DMUON_TEST_ENV}"
                     PROCESSORS 2 TIMEOUT 300)
