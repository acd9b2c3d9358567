// Rounding to bf16 on the device in pairs: one cvt.rn.bf16x2 instruction
// (sm_80) for two values, where core/dtype.hpp's float_to_bf16 takes about
// seven integer instructions for one. The same bits for every number (round
// to nearest, ties to even); a NaN comes out as the canonical quiet NaN
// instead of keeping its payload.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace dmuon {

// lo in the low half, as a little-endian pair of consecutive elements.
__device__ inline uint32_t bf16_pair(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace dmuon
