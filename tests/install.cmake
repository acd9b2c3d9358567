# The package and the examples: install into a temporary prefix and build
# outside C and Fortran projects against it (find_package and pkg-config);
# the examples on 2 ranks (signal checkpoint-and-exit, restart, restart from a
# checkpoint whose plan is not theirs, C and Fortran agreeing, the command
# line: --help, bad values, the final checkpoint); the README's demo, short.
set(install_test_dir ${CMAKE_CURRENT_SOURCE_DIR}/install)
set(example_work ${CMAKE_CURRENT_BINARY_DIR}/example_runs)
set(example_env ${DMUON_TEST_ENV} OMPI_MCA_rmaps_base_oversubscribe=1)

add_test(NAME install_consumers
         COMMAND ${install_test_dir}/run_consumers.sh ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install_consumers
                 ${DMuon_HAS_FORTRAN} ${MPIEXEC_EXECUTABLE} ${CMAKE_C_COMPILER} ${CMAKE_CXX_COMPILER}
                 ${CMAKE_Fortran_COMPILER})
# Configures and builds two projects: long on a loaded machine, and alone.
set_tests_properties(install_consumers PROPERTIES LABELS install ENVIRONMENT "${example_env}" TIMEOUT 900
                     RUN_SERIAL TRUE)

if(NOT DMUON_BUILD_EXAMPLES)
  return()
endif()
set(example_config ${PROJECT_SOURCE_DIR}/examples/surrogate.cfg)
set(example_tests example_c_signal_restart example_c_replanned_restart example_c_options)
# --help, bad values (exit 2, one message naming the option), the last step checkpointed.
add_test(NAME example_c_options COMMAND ${install_test_dir}/example_options.sh $<TARGET_FILE:burgers_surrogate_c>
                                        ${example_config} ${example_work}/c_options ${MPIEXEC_EXECUTABLE})
add_test(NAME example_c_signal_restart
         COMMAND ${install_test_dir}/example_signal_restart.sh $<TARGET_FILE:burgers_surrogate_c> ${example_config}
                 ${example_work}/c_signal ${MPIEXEC_EXECUTABLE})
# A restore that re-plans the storage (ckpt_tool, tests/checkpoint.cmake, writes the checkpoint).
add_test(NAME example_c_replanned_restart
         COMMAND ${install_test_dir}/example_replanned_restart.sh $<TARGET_FILE:burgers_surrogate_c> ${example_config}
                 ${example_work}/c_replanned ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:ckpt_tool>)
if(DMuon_HAS_FORTRAN)
  add_test(NAME example_fortran_signal_restart
           COMMAND ${install_test_dir}/example_signal_restart.sh $<TARGET_FILE:burgers_surrogate_f> ${example_config}
                   ${example_work}/f_signal ${MPIEXEC_EXECUTABLE})
  add_test(NAME example_fortran_replanned_restart
           COMMAND ${install_test_dir}/example_replanned_restart.sh $<TARGET_FILE:burgers_surrogate_f>
                   ${example_config} ${example_work}/f_replanned ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:ckpt_tool>)
  add_test(NAME example_c_fortran_agree
           COMMAND ${install_test_dir}/examples_agree.sh $<TARGET_FILE:burgers_surrogate_c>
                   $<TARGET_FILE:burgers_surrogate_f> ${example_config} ${example_work}/agree ${MPIEXEC_EXECUTABLE})
  add_test(NAME example_fortran_options
           COMMAND ${install_test_dir}/example_options.sh $<TARGET_FILE:burgers_surrogate_f> ${example_config}
                   ${example_work}/f_options ${MPIEXEC_EXECUTABLE})
  list(APPEND example_tests example_fortran_signal_restart example_fortran_replanned_restart example_c_fortran_agree
       example_fortran_options)
endif()
set_tests_properties(${example_tests} PROPERTIES LABELS "example;mpi" ENVIRONMENT "${example_env}" PROCESSORS 2
                     TIMEOUT 300)

find_program(DMUON_GNUPLOT gnuplot)
if(DMUON_GNUPLOT)
  add_test(NAME demo_short COMMAND ${install_test_dir}/demo_check.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                                   ${example_work}/demo)
else()
  # The demo's image needs gnuplot: say so (skipped, not passed).
  add_test(NAME demo_short COMMAND sh -c "echo 'gnuplot not found (Debian: apt-get install gnuplot-nox)'; exit 77")
  set_tests_properties(demo_short PROPERTIES SKIP_RETURN_CODE 77)
endif()
set_tests_properties(demo_short PROPERTIES LABELS "demo;mpi" ENVIRONMENT "${example_env}" PROCESSORS 2 TIMEOUT 300)
