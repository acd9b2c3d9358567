// CPU kernels of the replicated part of the step: gradient sum of squares,
// the clip/guard statistics, and the fused AdamW pass over the flat buffers.
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"

namespace dmuon {

void CpuBackend::accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, StepStats* stats) {
  double acc = 0.0;
  if (dtype == Dtype::fp32) {
    const float* g = static_cast<const float*>(buf) + offset;
    for (int64_t i = 0; i < count; ++i) acc += static_cast<double>(g[i]) * g[i];
  } else {
    const uint16_t* g = static_cast<const uint16_t*>(buf) + offset;
    for (int64_t i = 0; i < count; ++i) {
      const double x = bf16_to_float(g[i]);
      acc += x * x;
    }
  }
  stats->sumsq += acc;
}

void CpuBackend::finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed) {
  finish_step_stats(*stats, max_norm, skip_nonfinite, norm_computed);
}

namespace {
template <class T>
float load(const T* p, int64_t i);
template <>
float load<float>(const float* p, int64_t i) { return p[i]; }
template <>
float load<uint16_t>(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(uint16_t* p, int64_t i, float v) { p[i] = float_to_bf16(v); }

template <class T>
void adam_row(const AdamBuffers& b, const AdamScalarRow& r, const AdamDerived& d, float clip) {
  T* p = static_cast<T*>(b.param) + r.offset;
  const T* g = static_cast<const T*>(b.grad) + r.offset;
  float* m = b.exp_avg + r.offset;
  float* v = b.exp_avg_sq + r.offset;
  for (int64_t i = 0; i < r.numel; ++i) store(p, i, adam_element(load(p, i), load(g, i) * clip, m[i], v[i], r, d));
}
}  // namespace

void CpuBackend::adam_update(const AdamBuffers (&buffers)[kNumDtypes], const AdamScalarRow* rows, int num_rows,
                             int64_t* steps, const StepStats* stats) {
  if (stats->skip) return;
  const float clip = static_cast<float>(stats->clip_coef);
  for (int k = 0; k < num_rows; ++k) {
    const AdamScalarRow& r = rows[k];
    if (!r.active) continue;
    const AdamDerived d = adam_derive(r, ++steps[k]);
    const AdamBuffers& b = buffers[r.dtype];
    if (static_cast<Dtype>(r.dtype) == Dtype::fp32)
      adam_row<float>(b, r, d, clip);
    else
      adam_row<uint16_t>(b, r, d, clip);
  }
}

}  // namespace dmuon
