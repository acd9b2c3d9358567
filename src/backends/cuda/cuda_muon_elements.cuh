// The per-element arithmetic of the CUDA Muon passes, shared by the separate
// momentum and update kernels (cuda_muon.cu) and the fused small-matrix step
// (cuda_ns_fused.cu), so both paths compute the same numbers.
#pragma once
#include "core/dtype.hpp"

namespace dmuon {

// torch.optim.Muon's momentum: buf = m buf + (1-m) g; the update is
// (1-m) g + m buf with Nesterov, else buf.
__device__ inline float momentum_element(float g, float& b, float m, int nesterov) {
  b = m * b + (1.f - m) * g;
  return nesterov ? (1.f - m) * g + m * b : b;
}

// p = p * decay - lr * O, from the master when there is one (master_or_param).
__device__ inline float update_element(float start, float decay, float lr, float o) { return start * decay - lr * o; }

}  // namespace dmuon
