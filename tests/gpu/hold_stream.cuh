// "A step only enqueues", as the gpu tests check it: a kernel holds a stream
// busy until the host releases it, and dmuon_step() calls made behind it must
// return while it still runs. A host synchronisation or a waited-on
// device-to-host copy inside a step would block until the kernel gives up.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>

#include "gpu/gpu_model.hpp"

namespace gputest {

// Spins until the host sets *flag, or gives up after `max_cycles`.
__global__ void hold_stream(volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}

// Holds `stream` with hold_stream (giving up after about ten seconds), makes
// three dmuon_step() calls on m, then releases and drains the stream: every
// call must have returned with the kernel still running, and quickly.
// Fatal failures return early, as they would inline: wrap in ASSERT_NO_FATAL_FAILURE.
inline void expect_three_steps_never_wait(Model& m, cudaStream_t stream) {
  int* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *flag = 0;
  int* dflag = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0), cudaSuccess);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long long give_up = 10LL * clock_khz * 1000;  // about ten seconds
  hold_stream<<<1, 1, 0, stream>>>(dflag, give_up);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 3; ++k) ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t busy = cudaStreamQuery(stream);
  *reinterpret_cast<volatile int*>(flag) = 1;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(busy, cudaErrorNotReady) << "the stream finished before the host released it: a step waited";
  EXPECT_LT(seconds, 2.0) << "three steps took " << seconds << " s behind a held stream";
  cudaFreeHost(flag);
}

}  // namespace gputest
