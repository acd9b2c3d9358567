# cmake -DMODULE=cmake/DMuonCudaArchitectures.cmake -DWORK=<dir> -P cuda_architectures.cmake
# The default GPU architectures (DMuonCudaArchitectures.cmake) for the machines
# dmuon meets: the GPUs the build machine sees, else the documented list.
include(${MODULE})

function(expect probe nvcc want)
  dmuon_cuda_architectures_from(got why "${probe}" "${nvcc}")
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "probe '${probe}', nvcc ${nvcc}: got '${got}' (${why}), want '${want}'")
  endif()
  message(STATUS "probe '${probe}', nvcc ${nvcc}: ${got} (${why})")
endfunction()

expect("8.0" 13.0 "80")                      # A100
expect("7.0\n7.0\n7.0\n7.0" 12.4 "70")       # a V100 node: one entry per GPU
expect("9.0\n8.0" 13.0 "80;90")              # mixed, sorted
expect("12.0" 13.0 "120")                    # a newer GPU: two-digit major
expect("" 13.0 "80-real;90")                 # no GPU visible, CUDA 13 (no sm_70 any more)
expect("" 12.4 "70-real;80-real;90")         # no GPU visible, CUDA 12: V100 too
expect("No devices were found" 12.4 "70-real;80-real;90")

# The probe as `cmake --preset default` runs it, with an nvidia-smi that
# answers as one on an A100 machine does.
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/nvidia-smi "#!/bin/sh\n[ \"$1 $2\" = '--query-gpu=compute_cap --format=csv,noheader' ] || exit 9\necho 8.0\n")
file(CHMOD ${WORK}/nvidia-smi PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
set(DMUON_NVIDIA_SMI ${WORK}/nvidia-smi)
set(CMAKE_CUDA_COMPILER_VERSION 13.0)
dmuon_default_cuda_architectures(got why)
if(NOT got STREQUAL "80")
  message(FATAL_ERROR "with an A100 visible the default is '${got}' (${why}), want 80")
endif()
message(STATUS "A100 visible: ${got} (${why})")
