# Portability: the default GPU architectures, and checkpoints across HDF5
# versions (docs/guide/install.md).
add_test(NAME cuda_architectures_default
         COMMAND ${CMAKE_COMMAND} -DMODULE=${PROJECT_SOURCE_DIR}/cmake/DMuonCudaArchitectures.cmake
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cuda_architectures -P
                 ${CMAKE_CURRENT_SOURCE_DIR}/portability/cuda_architectures.cmake)
set_tests_properties(cuda_architectures_default PROPERTIES LABELS unit)

# A checkpoint written by another build of dmuon (its ckpt_tool, linked against
# another HDF5: .ci/run gives the 1.14 build the 1.10 build's) restores here,
# and one written here restores there, each on another number of ranks and
# continued bitwise as an uninterrupted run (ckpt_tool resume).
set(DMUON_CROSS_CKPT_TOOL "" CACHE FILEPATH "ckpt_tool of a dmuon build against another HDF5 (cross-version checkpoint tests)")
if(NOT DMUON_CROSS_CKPT_TOOL)
  return()
endif()
set(cross_dir ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_cross_version)
# The two tools must use different HDF5 libraries, or the tests below prove nothing.
add_test(NAME checkpoint_cross_version_libraries
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/portability/different_hdf5.sh ${DMUON_CROSS_CKPT_TOOL} $<TARGET_FILE:ckpt_tool>)
set_tests_properties(checkpoint_cross_version_libraries PROPERTIES LABELS checkpoint)
dmuon_add_mpi_test(NAME checkpoint_cross_save_there COMMAND ${DMUON_CROSS_CKPT_TOOL} save ${cross_dir}/there 5
                   NPROCS 2 LABELS checkpoint PROPERTIES FIXTURES_SETUP checkpoint_cross_there)
dmuon_add_mpi_test(NAME checkpoint_cross_restore_here COMMAND ckpt_tool resume ${cross_dir}/there 5 3 2
                   NPROCS 3 LABELS checkpoint PROPERTIES FIXTURES_REQUIRED checkpoint_cross_there)
dmuon_add_mpi_test(NAME checkpoint_cross_save_here COMMAND ckpt_tool save ${cross_dir}/here 5
                   NPROCS 2 LABELS checkpoint PROPERTIES FIXTURES_SETUP checkpoint_cross_here)
dmuon_add_mpi_test(NAME checkpoint_cross_restore_there COMMAND ${DMUON_CROSS_CKPT_TOOL} resume ${cross_dir}/here 5 3 2
                   NPROCS 3 LABELS checkpoint PROPERTIES FIXTURES_REQUIRED checkpoint_cross_here)
