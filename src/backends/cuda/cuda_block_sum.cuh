// Block-wide sum in a fixed order (a shared-memory tree over kThreads
// threads), so a reduction gives the same bits on every run. Shared by the
// gradient-norm kernels (double) and the Muon normalisation (float).
#pragma once
#include "backends/cuda/cuda_state.hpp"

namespace dmuon {

template <class V>
__device__ V block_sum(V x) {
  __shared__ V sh[kThreads];
  sh[threadIdx.x] = x;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

}  // namespace dmuon
