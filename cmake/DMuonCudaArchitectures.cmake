# The GPU architectures dmuon's kernels are built for when the user names none
# (CMAKE_CUDA_ARCHITECTURES or CUDAARCHS): those of the GPUs the build machine
# sees, else a list covering the GPUs of current clusters. The choice is
# printed at configure; docs/guide/install.md lists it.

# dmuon_cuda_architectures_from(<out> <why> <probe> <nvcc_version>): the
# choice from the text `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`
# printed ("8.0" per GPU; empty when none is visible) and nvcc's version.
# Kept apart from the probe so a test can check it (tests/unit/cuda_architectures.cmake).
function(dmuon_cuda_architectures_from out why probe nvcc_version)
  string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${probe}")
  set(archs "")
  foreach(cap IN LISTS caps)
    string(REPLACE "." "" arch "${cap}")
    list(APPEND archs ${arch})
  endforeach()
  if(archs)
    list(REMOVE_DUPLICATES archs)
    list(SORT archs COMPARE NATURAL)
    set(${out} "${archs}" PARENT_SCOPE)
    set(${why} "the GPUs this machine sees" PARENT_SCOPE)
    return()
  endif()
  # No GPU visible: V100 (sm_70, which CUDA 13 no longer compiles for), A100
  # (sm_80), H100 and GH200 (sm_90) as machine code, and sm_90 as PTX too,
  # which newer GPUs compile at load time.
  set(archs 80-real 90)
  if(nvcc_version VERSION_LESS 13)
    list(PREPEND archs 70-real)
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
  set(${why} "no GPU visible: V100 (CUDA < 13), A100, H100/GH200, PTX for newer" PARENT_SCOPE)
endfunction()

# dmuon_default_cuda_architectures(<out> <why>): the same with the probe run
# on this machine.
function(dmuon_default_cuda_architectures out why)
  set(probe "")
  find_program(DMUON_NVIDIA_SMI nvidia-smi)
  if(DMUON_NVIDIA_SMI)
    execute_process(COMMAND ${DMUON_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE probe RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 30)
    if(NOT rc EQUAL 0)
      set(probe "")
    endif()
  endif()
  dmuon_cuda_architectures_from(archs reason "${probe}" "${CMAKE_CUDA_COMPILER_VERSION}")
  set(${out} "${archs}" PARENT_SCOPE)
  set(${why} "${reason}" PARENT_SCOPE)
endfunction()
