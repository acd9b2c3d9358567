# gpu-labelled tests (tests/gpu/): built whenever the CUDA backend is, run on a
# machine with a GPU. Without a visible device each reports "skipped" to CTest
# (exit code 77, SKIP_RETURN_CODE), so CI compiles and lists them.
if(NOT DMuon_HAS_CUDA)
  return()
endif()

add_library(dmuon_gpu_test_main STATIC gpu/gpu_gtest_main.cpp)
target_include_directories(dmuon_gpu_test_main PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(dmuon_gpu_test_main PUBLIC dmuon MPI::MPI_CXX GTest::gtest CUDA::cudart)

# dmuon_add_gpu_test(<name> <source>): one rank (one GPU on the test machine).
function(dmuon_add_gpu_test name source)
  add_executable(${name} ${source} support/reference.cpp)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE dmuon_gpu_test_main CUDA::cudart)
  dmuon_add_mpi_test(NAME ${name} COMMAND ${name} NPROCS 1 LABELS gpu PROPERTIES SKIP_RETURN_CODE 77)
endfunction()

dmuon_add_gpu_test(test_cuda_adam gpu/test_cuda_adam.cpp)
dmuon_add_gpu_test(test_cuda_muon gpu/test_cuda_muon.cpp)
dmuon_add_gpu_test(test_cuda_step_graph gpu/test_cuda_step_graph.cpp)
dmuon_add_gpu_test(test_cuda_async gpu/test_cuda_async.cu)
# Symmetric Newton-Schulz products: equal to plain within bf16 tolerance, replay
# bitwise eager, per-shape choice timed once and cached on disk.
dmuon_add_gpu_test(test_cuda_ns_symmetric gpu/test_cuda_ns_symmetric.cu)
# The cache file's format and writing, without a GPU: runs wherever the CUDA backend is built.
dmuon_add_gtest(test_ns_tuning_cache SOURCES gpu/test_ns_tuning_cache.cpp NPROCS 1 LABELS unit)
# collective_timeout_ms on one GPU: a stalled stream (DMUON_FAULT_POINT=cuda-stall) gives
# DMUON_ERR_TIMEOUT at the first host wait, then fast failures, and destroy returns.
dmuon_add_gpu_test(test_cuda_timeout gpu/test_cuda_timeout.cpp)
# Checkpoints from and into device memory (the pinned staging of large host
# transfers): exact bytes across backends both ways, and bitwise continuation.
dmuon_add_gpu_test(test_cuda_checkpoint gpu/test_cuda_checkpoint.cpp)

# A rank dies during a step on NCCL (2 ranks, one GPU each; skipped with fewer
# GPUs): the survivor gets PEER_FAILED or TIMEOUT. Run and judge as the CPU
# rank-death tests (tests/hardening.cmake): with orte_enable_recovery mpirun's
# status says nothing, so the survivor writes a verdict and a second test reads it.
add_executable(die_in_step_cuda gpu/die_in_step_cuda.cpp)
target_link_libraries(die_in_step_cuda PRIVATE dmuon MPI::MPI_CXX CUDA::cudart)
target_include_directories(die_in_step_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
set(dmuon_die_cuda_dir ${CMAKE_CURRENT_BINARY_DIR}/gpu/die_in_step_cuda)
file(MAKE_DIRECTORY ${dmuon_die_cuda_dir})
dmuon_add_mpi_test(NAME die_in_step_cuda COMMAND die_in_step_cuda ${dmuon_die_cuda_dir} 1 1500 NPROCS 2
                   LABELS gpu multigpu)
set_tests_properties(die_in_step_cuda_np2 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};OMPI_MCA_orte_enable_recovery=1"
                     TIMEOUT 120 FIXTURES_SETUP die_in_step_cuda SKIP_RETURN_CODE 77
                     SKIP_REGULAR_EXPRESSION "gpu test skipped")
add_test(NAME die_in_step_cuda_verdict COMMAND ${CMAKE_COMMAND} -DDIR=${dmuon_die_cuda_dir} -DNPROCS=2 -DVICTIM=1
                                               -P ${CMAKE_CURRENT_SOURCE_DIR}/hardening/check_verdicts.cmake)
set_tests_properties(die_in_step_cuda_verdict PROPERTIES FIXTURES_REQUIRED die_in_step_cuda LABELS "gpu;multigpu"
                     SKIP_REGULAR_EXPRESSION "gpu test skipped")

# Runs everywhere: with no device visible, "cuda" is refused clearly and "auto" picks cpu.
dmuon_add_gtest(test_cuda_nodevice SOURCES gpu/test_cuda_nodevice.cpp NPROCS 1 LABELS gpu)
set_tests_properties(test_cuda_nodevice_np1 PROPERTIES ENVIRONMENT "${DMUON_TEST_ENV};CUDA_VISIBLE_DEVICES=")

# dmuon against torch.optim.AdamW and torch.optim.Muon on identical inputs:
# a program dumps inputs and results, a Python script runs torch and compares.
add_executable(torch_compare_dump gpu/torch_compare_dump.cpp support/reference.cpp)
target_include_directories(torch_compare_dump PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(torch_compare_dump PRIVATE dmuon MPI::MPI_CXX CUDA::cudart GTest::gtest)
add_test(NAME test_cuda_vs_torch
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/torch_compare.sh $<TARGET_FILE:torch_compare_dump>
                 ${CMAKE_CURRENT_BINARY_DIR}/torch_compare)
set_tests_properties(test_cuda_vs_torch PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${DMUON_TEST_ENV}" TIMEOUT 300)
# Accumulation, device metrics and schedules on the GPU, eager and whole-step graph (issue 21).
dmuon_add_gpu_test(test_cuda_training gpu/test_cuda_training.cpp)
