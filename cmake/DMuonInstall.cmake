# Installation and the CMake package: find_package(DMuon CONFIG) gives
# DMuon::dmuon (and DMuon::dmuon_fortran with its .mod files), feature
# variables DMuon_HAS_CUDA and DMuon_HAS_FORTRAN, a version file, and
# pkg-config's dmuon.pc. Included once from the top-level CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(DMUON_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/DMuon CACHE STRING "where DMuonConfig.cmake is installed")
# .mod files are compiler-specific: they get their own directory.
set(DMUON_INSTALL_FORTRAN_MODDIR ${CMAKE_INSTALL_INCLUDEDIR}/dmuon/fortran)

set(dmuon_install_targets dmuon)
if(DMuon_HAS_FORTRAN)
  list(APPEND dmuon_install_targets dmuon_fortran)
endif()
install(TARGETS ${dmuon_install_targets} EXPORT DMuonTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(DMuon_HAS_CUDA)
  # Loaded at run time (backends/cuda_plugin.hpp), never linked: in no export set.
  install(TARGETS dmuon_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dmuon DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
if(DMuon_HAS_FORTRAN)
  install(DIRECTORY ${DMUON_FORTRAN_MODULE_DIR}/ DESTINATION ${DMUON_INSTALL_FORTRAN_MODDIR}
          FILES_MATCHING PATTERN "*.mod")
endif()
install(EXPORT DMuonTargets NAMESPACE DMuon:: DESTINATION ${DMUON_INSTALL_CMAKEDIR})

# A static libdmuon carries its private dependencies into the consumer's
# link line: the config file finds them again, as they were found here.
get_target_property(dmuon_library_type dmuon TYPE)
# A static libdmuon in a program looks for libdmuon_cuda through the program's
# RUNPATH: a program linked through the package gets the install's libdir
# there, as one linked through dmuon.pc does.
if(DMuon_HAS_CUDA AND dmuon_library_type STREQUAL "STATIC_LIBRARY")
  target_link_options(dmuon INTERFACE $<INSTALL_INTERFACE:LINKER:-rpath,$<INSTALL_PREFIX>/${CMAKE_INSTALL_LIBDIR}>)
endif()
if(dmuon_library_type STREQUAL "STATIC_LIBRARY")
  set(DMUON_CONFIG_STATIC ON)
else()
  set(DMUON_CONFIG_STATIC OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/DMuonConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/DMuonConfig.cmake
                              INSTALL_DESTINATION ${DMUON_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/DMuonConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/DMuonConfig.cmake ${PROJECT_BINARY_DIR}/DMuonConfigVersion.cmake
        DESTINATION ${DMUON_INSTALL_CMAKEDIR})

# pkg-config: the C library; Fortran users add -I${fmoddir} -ldmuon_fortran.
set(DMUON_PC_REQUIRES_PRIVATE "")
set(DMUON_PC_LIBS_PRIVATE "")
if(dmuon_library_type STREQUAL "STATIC_LIBRARY")
  # MPI's C library only: dmuon's objects are built without MPI's C++ bindings.
  foreach(lib IN LISTS HDF5_C_LIBRARIES BLAS_LIBRARIES MPI_C_LIBRARIES)
    if(lib MATCHES "^/")
      get_filename_component(dir ${lib} DIRECTORY)
      get_filename_component(name ${lib} NAME_WE)
      string(REGEX REPLACE "^lib" "" name ${name})
      string(APPEND DMUON_PC_LIBS_PRIVATE " -L${dir} -l${name}")
    elseif(lib MATCHES "^-")
      string(APPEND DMUON_PC_LIBS_PRIVATE " ${lib}")
    endif()
  endforeach()
  string(APPEND DMUON_PC_LIBS_PRIVATE " -lstdc++ -lm")
  if(DMuon_HAS_CUDA)
    string(APPEND DMUON_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")  # dlopen of libdmuon_cuda
  endif()
endif()
# Relocatable: the prefix is found from the .pc file's own place, so
# `cmake --install --prefix DIR` gives a correct file wherever DIR is.
file(RELATIVE_PATH DMUON_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" DMUON_PC_UP "${DMUON_PC_UP}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/dmuon.pc.in ${PROJECT_BINARY_DIR}/dmuon.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dmuon.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
