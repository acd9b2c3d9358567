# Fortran tests: twins of the C tests of registration, step and checkpoints,
# each built twice, with `use mpi` (_mpi) and with `use mpi_f08` (_f08), and
# run on 2 ranks.
if(NOT DMuon_HAS_FORTRAN)
  return()
endif()
add_library(dmuon_ftest STATIC fortran/ftest.F90 fortran/fref.f90)
set_target_properties(dmuon_ftest PROPERTIES Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fmod/support)
target_include_directories(dmuon_ftest PUBLIC ${CMAKE_CURRENT_BINARY_DIR}/fmod/support)
target_link_libraries(dmuon_ftest PUBLIC MPI::MPI_Fortran)

set(fortran_ckpt_dir ${CMAKE_CURRENT_BINARY_DIR}/fortran_checkpoints)
foreach(name IN ITEMS registration step checkpoint training master_weights)
  foreach(flavour IN ITEMS mpi f08)
    set(target test_f_${name}_${flavour})
    add_executable(${target} fortran/test_f_${name}.F90)
    target_link_libraries(${target} PRIVATE dmuon_ftest DMuon::dmuon_fortran)
    target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/fortran)
    # each target its own module directory: the programs build in parallel
    set_target_properties(${target} PROPERTIES Fortran_PREPROCESS ON
                          Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fmod/${target})
    if(flavour STREQUAL "f08")
      target_compile_definitions(${target} PRIVATE DMUON_TEST_MPI_F08)
    endif()
    set(args "")
    if(name STREQUAL "checkpoint")
      set(args ${fortran_ckpt_dir}/${flavour})
    elseif(name STREQUAL "master_weights")
      set(args ${fortran_ckpt_dir}/master_${flavour})
    endif()
    dmuon_add_mpi_test(NAME fortran_${name}_${flavour} COMMAND ${target} ${args} NPROCS 2 LABELS fortran)
  endforeach()
endforeach()
