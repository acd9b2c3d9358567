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

// The Muon normalisation's factor 1 / max(factor * ||X||_F, eps) from ||X||_F^2.
__device__ inline float norm_scale(double sumsq, float factor, float eps) {
  return 1.f / fmaxf(factor * static_cast<float>(sqrt(sumsq)), eps);
}

// norm_scale with ||X||_F^2 summed from the momentum pass's `count` partial
// sums in a fixed order, the same in every block that asks (the normalisation
// kernel). Called by every thread of the block. `Partials` is a const float
// pointer, volatile where other blocks of the same launch wrote them.
template <class Partials>
__device__ inline float norm_scale_from_partials(Partials partials, unsigned count, float factor, float eps) {
  __shared__ float scale;
  double s = 0.0;
  for (unsigned j = threadIdx.x; j < count; j += kThreads) s += partials[j];
  s = block_sum(s);
  if (threadIdx.x == 0) scale = norm_scale(s, factor, eps);
  __syncthreads();
  return scale;
}

}  // namespace dmuon
