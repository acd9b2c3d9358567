// Element types and bf16 <-> fp32 conversion (round to nearest even), usable on
// host and device so that both backends round identically.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dmuon/dmuon.h"

#if defined(__CUDACC__)
#define DMUON_HD __host__ __device__ inline
#else
#define DMUON_HD inline
#endif

namespace dmuon {

enum class Dtype : int { fp32 = DMUON_DTYPE_FP32, bf16 = DMUON_DTYPE_BF16 };
constexpr int kNumDtypes = 2;
enum class Kind : int { muon = DMUON_KIND_MUON, adam = DMUON_KIND_ADAM };

inline std::size_t dtype_size(Dtype d) { return d == Dtype::fp32 ? 4 : 2; }
inline const char* dtype_name(Dtype d) { return d == Dtype::fp32 ? "fp32" : "bf16"; }
inline const char* kind_name(Kind k) { return k == Kind::muon ? "muon" : "adam"; }

DMUON_HD float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

DMUON_HD uint16_t float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Element access for loops templated on the storage type (float, or uint16_t
// holding bf16): arithmetic happens in fp32 and a bf16 store rounds once.
DMUON_HD float load_f32(const float* p, int64_t i) { return p[i]; }
DMUON_HD float load_f32(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
DMUON_HD void store_f32(float* p, int64_t i, float v) { p[i] = v; }
DMUON_HD void store_f32(uint16_t* p, int64_t i, float v) { p[i] = float_to_bf16(v); }

// Master weights (option master_weights): an fp32 copy of a bf16 parameter
// that the update reads and writes, the parameter being its rounding. An
// element whose parameter is not the rounding of its master was written by the
// program since (or the master is fresh, zero), so the update starts from the
// parameter: a zeroed master means "re-read the parameters at the next step".
DMUON_HD float master_or_param(float master, uint16_t param) {
  return float_to_bf16(master) == param ? master : bf16_to_float(param);
}

}  // namespace dmuon
