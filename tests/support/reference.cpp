#include "support/reference.hpp"

#include <cmath>
#include <cstring>

namespace ref {

double noise(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (a + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
  x ^= (b + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull;
  x ^= (c + 0x27D4EB2F165667C5ull) * 0xD6E8FEB86659FD93ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

double round_to(int dtype, double x) {
  const float f = static_cast<float>(x);
  return dtype == DMUON_DTYPE_FP32 ? f : bf16_to_float(float_to_bf16(f));
}

std::vector<double> load(const void* p, int dtype, int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = dtype == DMUON_DTYPE_FP32 ? static_cast<const float*>(p)[i]
                                     : bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  return v;
}

void store(void* p, int dtype, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DMUON_DTYPE_FP32)
      static_cast<float*>(p)[i] = static_cast<float>(v[i]);
    else
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v[i]));
  }
}

void adamw_step(std::vector<double>& p, const std::vector<double>& g, AdamState& s, double lr, double beta1,
                double beta2, double eps, double weight_decay) {
  if (s.m.empty()) {
    s.m.assign(p.size(), 0.0);
    s.v.assign(p.size(), 0.0);
  }
  s.step += 1;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1.0 - lr * weight_decay;
    s.m[i] = beta1 * s.m[i] + (1.0 - beta1) * g[i];
    s.v[i] = beta2 * s.v[i] + (1.0 - beta2) * g[i] * g[i];
    p[i] -= lr / bc1 * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bc2) + eps);
  }
}

}  // namespace ref
