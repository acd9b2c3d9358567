# gpu-labelled tests (tests/gpu/): built whenever the CUDA backend is, run on a
# machine with a GPU. Without a visible device each reports "skipped" to CTest
# (exit code 77, SKIP_RETURN_CODE), so CI compiles and lists them.
if(NOT DMuon_HAS_CUDA)
  return()
endif()

add_library(dmuon_gpu_test_main STATIC gpu/gpu_gtest_main.cpp)
target_include_directories(dmuon_gpu_test_main PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
# dmuon_cuda: the tests reach into the CUDA backend (the core only loads it at run time).
target_link_libraries(dmuon_gpu_test_main PUBLIC dmuon dmuon_cuda MPI::MPI_CXX GTest::gtest CUDA::cudart)

# Every rank of a gpu test starts through gpu/gpu_rank.sh: where ranks
# outnumber the GPUs (the one-GPU test machine) they share one on purpose,
# each looking like another host to NCCL.
set(dmuon_gpu_rank ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_rank.sh)

# dmuon_add_gpu_test(<name> <source>): at 1, 2 and 4 ranks.
# dmuon_add_gpu_test(name source [NPROCS n...]): at 1, 2 and 4 ranks unless told.
function(dmuon_add_gpu_test name source)
  cmake_parse_arguments(GT "" "" "NPROCS" ${ARGN})
  if(NOT GT_NPROCS)
    set(GT_NPROCS 1 2 4)
  endif()
  add_executable(${name} ${source} support/reference.cpp)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE dmuon_gpu_test_main CUDA::cudart)
  dmuon_add_mpi_test(NAME ${name} COMMAND ${dmuon_gpu_rank} $<TARGET_FILE:${name}> NPROCS ${GT_NPROCS} LABELS gpu
                     PROPERTIES SKIP_RETURN_CODE 77)
endfunction()

dmuon_add_gpu_test(test_cuda_adam gpu/test_cuda_adam.cpp)
dmuon_add_gpu_test(test_cuda_muon gpu/test_cuda_muon.cpp)
dmuon_add_gpu_test(test_cuda_step_graph gpu/test_cuda_step_graph.cpp)
dmuon_add_gpu_test(test_cuda_async gpu/test_cuda_async.cu)
# Code as users write it: plain cudaMemcpy in and out of the views, no
# synchronisation of its own, against the float64 reference.
dmuon_add_gpu_test(test_cuda_natural gpu/test_cuda_natural.cu)
# The device a context runs on ("cuda", "cuda:N", "cuda:current") and the
# refusal of ranks that share a GPU without the opt-in.
dmuon_add_gpu_test(test_cuda_device gpu/test_cuda_device.cpp)
# Symmetric Newton-Schulz products: equal to plain within bf16 tolerance, replay
# bitwise eager, per-shape choice timed once and cached on disk.
dmuon_add_gpu_test(test_cuda_ns_symmetric gpu/test_cuda_ns_symmetric.cu)
# Gram Newton-Schulz forced: within its bf16 tolerance of the plain iteration
# (both schedules), plain where it does not fit, replay bitwise eager.
dmuon_add_gpu_test(test_cuda_ns_gram gpu/test_cuda_ns_gram.cu)
# Muon shape batches in concurrent lanes: bit for bit what one order computes,
# eager, per-shape graphs and the whole-step graph.
dmuon_add_gpu_test(test_cuda_shape_lanes gpu/test_cuda_shape_lanes.cpp)
# Programmatic edges: a probe shows a kernel that does not wait reading too
# early, and the cuBLAS products of Newton-Schulz's shapes waiting (their
# kernels among those the library makes programmatic edges into).
dmuon_add_gpu_test(test_cuda_pdl gpu/test_cuda_pdl.cu NPROCS 1)
target_link_libraries(test_cuda_pdl PRIVATE CUDA::cublas)
# Which kernels the edges may be made programmatic into, by name, without a GPU.
dmuon_add_gtest(test_cuda_pdl_rule SOURCES gpu/test_cuda_pdl_rule.cpp NPROCS 1 LABELS unit)
target_link_libraries(test_cuda_pdl_rule PRIVATE dmuon_cuda CUDA::cudart)
# The cache file's format and writing, without a GPU: runs wherever the CUDA backend is built.
dmuon_add_gtest(test_ns_tuning_cache SOURCES gpu/test_ns_tuning_cache.cpp NPROCS 1 LABELS unit)
target_link_libraries(test_ns_tuning_cache PRIVATE dmuon_cuda)
# The node-local rank that "cuda" maps devices by, without a GPU: a context on
# a communicator of some ranks only does not wait for the others.
dmuon_add_gtest(test_cuda_node_rank SOURCES gpu/test_cuda_node_rank.cpp NPROCS 2 LABELS unit)
target_link_libraries(test_cuda_node_rank PRIVATE dmuon_cuda)
# collective_timeout_ms on one GPU: a stalled stream (DMUON_FAULT_POINT=cuda-stall) gives
# DMUON_ERR_TIMEOUT at the first host wait, then fast failures, and destroy returns.
dmuon_add_gpu_test(test_cuda_timeout gpu/test_cuda_timeout.cpp)
# Checkpoints from and into device memory (the pinned staging of large host
# transfers): exact bytes across backends both ways, and bitwise continuation.
dmuon_add_gpu_test(test_cuda_checkpoint gpu/test_cuda_checkpoint.cpp)

# A rank dies during a step on NCCL (2 ranks; on one GPU through gpu_rank.sh):
# the survivor gets PEER_FAILED or TIMEOUT. Run and judge as the CPU
# rank-death tests (tests/hardening.cmake): with orte_enable_recovery mpirun's
# status says nothing, so the survivor writes a verdict and a second test reads it.
add_executable(die_in_step_cuda gpu/die_in_step_cuda.cpp)
target_link_libraries(die_in_step_cuda PRIVATE dmuon MPI::MPI_CXX CUDA::cudart)
target_include_directories(die_in_step_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
set(dmuon_die_cuda_dir ${CMAKE_CURRENT_BINARY_DIR}/gpu/die_in_step_cuda)
file(MAKE_DIRECTORY ${dmuon_die_cuda_dir})
dmuon_add_mpi_test(NAME die_in_step_cuda COMMAND ${dmuon_gpu_rank} $<TARGET_FILE:die_in_step_cuda> ${dmuon_die_cuda_dir} 1 1500 NPROCS 2
                   LABELS gpu multigpu)
set_tests_properties(die_in_step_cuda_np2 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};OMPI_MCA_orte_enable_recovery=1"
                     TIMEOUT 120 FIXTURES_SETUP die_in_step_cuda SKIP_RETURN_CODE 77
                     SKIP_REGULAR_EXPRESSION "gpu test skipped")
add_test(NAME die_in_step_cuda_verdict COMMAND ${CMAKE_COMMAND} -DDIR=${dmuon_die_cuda_dir} -DNPROCS=2 -DVICTIM=1
                                               -P ${CMAKE_CURRENT_SOURCE_DIR}/hardening/check_verdicts.cmake)
set_tests_properties(die_in_step_cuda_verdict PROPERTIES FIXTURES_REQUIRED die_in_step_cuda LABELS "gpu;multigpu"
                     SKIP_REGULAR_EXPRESSION "gpu test skipped")

# Checkpoints of GPU ranks across rank counts and backends (ckpt_tool, as the
# CPU's N->M tests): saved on 4 GPU ranks, resumed on 2 and 1 GPU ranks and on
# 2 CPU ranks; saved on 2 CPU ranks, resumed on 4 GPU ranks. Each resume
# re-saves and finds the original checksums (the restore is exact), then
# follows an uninterrupted run of its own backend and rank count to rounding:
# 2.5e-2 of each part's scale between GPU rank counts (bf16 Newton-Schulz
# batched differently: 4% of an update), 5e-2 across backends (bf16 against
# fp32 Newton-Schulz).
set(gpu_ckpt ${CMAKE_CURRENT_BINARY_DIR}/gpu/checkpoints)
file(MAKE_DIRECTORY ${gpu_ckpt})
function(dmuon_gpu_ckpt_test name nprocs backend tolerance fixture_setup fixture_required)
  dmuon_add_mpi_test(NAME ${name} COMMAND ${dmuon_gpu_rank} $<TARGET_FILE:ckpt_tool> ${ARGN} NPROCS ${nprocs}
                     LABELS "gpu;checkpoint")
  set(env "${DMUON_TEST_ENV};DMUON_TEST_GPU=1;DMUON_TEST_BACKEND=${backend}")
  if(tolerance)
    list(APPEND env DMUON_TEST_TOLERANCE=${tolerance})
  endif()
  set_tests_properties(${name}_np${nprocs} PROPERTIES ENVIRONMENT "${env}" SKIP_RETURN_CODE 77 TIMEOUT 300)
  if(fixture_setup)
    set_tests_properties(${name}_np${nprocs} PROPERTIES FIXTURES_SETUP ${fixture_setup})
  endif()
  if(fixture_required)
    set_tests_properties(${name}_np${nprocs} PROPERTIES FIXTURES_REQUIRED ${fixture_required}
                                                        RESOURCE_LOCK ${fixture_required})
  endif()
endfunction()
dmuon_gpu_ckpt_test(gpu_ckpt_save_cuda4 4 cuda "" gpu_ckpt_cuda4 "" save ${gpu_ckpt}/cuda4 5)
dmuon_gpu_ckpt_test(gpu_ckpt_cuda4_to_cuda2 2 cuda 2.5e-2 "" gpu_ckpt_cuda4 resume ${gpu_ckpt}/cuda4 5 3 4)
dmuon_gpu_ckpt_test(gpu_ckpt_cuda4_to_cuda1 1 cuda 2.5e-2 "" gpu_ckpt_cuda4 resume ${gpu_ckpt}/cuda4 5 3 4)
dmuon_gpu_ckpt_test(gpu_ckpt_cuda4_to_cpu2 2 cpu 5e-2 "" gpu_ckpt_cuda4 resume ${gpu_ckpt}/cuda4 5 3 4)
dmuon_gpu_ckpt_test(gpu_ckpt_save_cpu2 2 cpu "" gpu_ckpt_cpu2 "" save ${gpu_ckpt}/cpu2 5)
dmuon_gpu_ckpt_test(gpu_ckpt_cpu2_to_cuda4 4 cuda 5e-2 "" gpu_ckpt_cpu2 resume ${gpu_ckpt}/cpu2 5 3 2)
# A device the build has no kernels for is refused by name: the check, built
# here for sm_75 alone (and not linked with libdmuon_cuda, which has its own).
add_executable(test_cuda_arch_check gpu/test_cuda_arch_check.cpp gpu/gpu_gtest_main.cpp
                                    ${PROJECT_SOURCE_DIR}/src/backends/cuda/cuda_arch_check.cu)
target_include_directories(test_cuda_arch_check PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(test_cuda_arch_check PRIVATE DMUON_CUDA_ARCHITECTURES="75-real")
set_target_properties(test_cuda_arch_check PROPERTIES CUDA_ARCHITECTURES 75-real)
target_link_libraries(test_cuda_arch_check PRIVATE MPI::MPI_CXX GTest::gtest CUDA::cudart)
dmuon_add_mpi_test(NAME test_cuda_arch_check COMMAND test_cuda_arch_check NPROCS 1 LABELS gpu
                   PROPERTIES SKIP_RETURN_CODE 77)

# Runs everywhere: with no device visible, "cuda" is refused clearly and "auto" picks cpu.
dmuon_add_gtest(test_cuda_nodevice SOURCES gpu/test_cuda_nodevice.cpp NPROCS 1 LABELS gpu)
set_tests_properties(test_cuda_nodevice_np1 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};CUDA_VISIBLE_DEVICES=")

# dmuon against torch.optim.AdamW and torch.optim.Muon on identical inputs:
# a program dumps inputs and results, a Python script runs torch and compares.
add_executable(torch_compare_dump gpu/torch_compare_dump.cpp support/reference.cpp)
target_include_directories(torch_compare_dump PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(torch_compare_dump PRIVATE dmuon MPI::MPI_CXX CUDA::cudart GTest::gtest)
foreach(n 1 2)
  add_test(NAME test_cuda_vs_torch_np${n}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_compare.sh ${CMAKE_CURRENT_BINARY_DIR}/torch_compare_np${n}
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS} ${dmuon_gpu_rank}
                   $<TARGET_FILE:torch_compare_dump>)
  set_tests_properties(test_cuda_vs_torch_np${n} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${DMUON_TEST_ENV}"
                       TIMEOUT 300)
endforeach()
# Accumulation, device metrics and schedules on the GPU, eager and whole-step graph.
dmuon_add_gpu_test(test_cuda_training gpu/test_cuda_training.cpp)
# Master weights of bf16 parameters (option master_weights): updates below half
# a bf16 ulp add up as in fp32, vanish without the option; checkpointed on N
# ranks and restored on M (2 <-> 1: the CPU test covers 4 ranks; ranks sharing
# one GPU checkpoint over NCCL's socket transport, minutes at 4).
dmuon_add_gpu_test(test_cuda_master_weights gpu/test_cuda_master_weights.cpp NPROCS 1 2)
