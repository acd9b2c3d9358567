// CPU kernels of the replicated part of the step: gradient sum of squares,
// the clip/guard statistics, and the fused AdamW pass over the flat buffers.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"

namespace dmuon {

void CpuBackend::accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, double scale,
                                  StepStats* stats) {
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
  stats->sumsq += acc * scale * scale;
}

void CpuBackend::finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed,
                              bool /*adam_follows*/) {
  finish_step_stats(*stats, max_norm, skip_nonfinite, norm_computed);
}

namespace {
// The Adam pass is compiled three times, for the baseline x86-64, AVX2 and
// AVX-512, and the loader picks the widest the CPU runs (GCC's function
// multiversioning): wider vectors for its sqrt, division and bf16
// conversions, which bound the bf16 pass (docs/decisions.md, "CPU Adam
// pass"). The same operations in the same order and no FMA (this file is
// compiled with -ffp-contract=off; AVX2 does not bring FMA): every clone gives
// the same bits (test_cpu_adam_bits). Not under sanitizers, whose runtimes may
// start after the loader resolves the clones.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define DMUON_ADAM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DMUON_ADAM_CLONES
#endif

// The element loop over fp32 values; p and g may be the parameter buffer
// itself (fp32) or a widened block of a bf16 one.
inline void adam_span(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
               int64_t n, const AdamScalarRow& row, const AdamDerived& derived, float clip) {
  // Local copies: the rows hold floats, which stores to a float buffer could
  // alias, and that would keep the loop from vectorising.
  const AdamScalarRow r = row;
  const AdamDerived d = derived;
  for (int64_t i = 0; i < n; ++i) {
    float mi = m[i], vi = v[i];
    p[i] = adam_element(p[i], g[i] * clip, mi, vi, r, d);
    m[i] = mi;
    v[i] = vi;
  }
}

DMUON_ADAM_CLONES void adam_row(const AdamBuffers& b, const AdamScalarRow& r, const AdamDerived& d, float clip) {
  float* m = b.exp_avg + r.offset;
  float* v = b.exp_avg_sq + r.offset;
  if (static_cast<Dtype>(r.dtype) == Dtype::fp32) {
    adam_span(static_cast<float*>(b.param) + r.offset, static_cast<const float*>(b.grad) + r.offset, m, v, r.numel,
              r, d, clip);
    return;
  }
  // bf16: widen a cache-sized block, update it in fp32, round it back. Three
  // simple loops vectorise where one loop mixing widths did not. With master
  // weights the block starts from the masters (or the parameters the program
  // wrote) and goes back to them before it is rounded.
  constexpr int64_t kBlock = 1024;
  float pf[kBlock], gf[kBlock];
  uint16_t* __restrict p = static_cast<uint16_t*>(b.param) + r.offset;
  const uint16_t* __restrict g = static_cast<const uint16_t*>(b.grad) + r.offset;
  float* __restrict master = b.master ? b.master + r.offset : nullptr;
  for (int64_t at = 0; at < r.numel; at += kBlock) {
    const int64_t n = std::min(kBlock, r.numel - at);
    if (master)
      for (int64_t i = 0; i < n; ++i) pf[i] = master_or_param(master[at + i], p[at + i]);
    else
      for (int64_t i = 0; i < n; ++i) pf[i] = bf16_to_float(p[at + i]);
    for (int64_t i = 0; i < n; ++i) gf[i] = bf16_to_float(g[at + i]);
    adam_span(pf, gf, m + at, v + at, n, r, d, clip);
    if (master)
      for (int64_t i = 0; i < n; ++i) master[at + i] = pf[i];
    for (int64_t i = 0; i < n; ++i) p[at + i] = float_to_bf16(pf[i]);
  }
}
}  // namespace

void CpuBackend::adam_update(const AdamBuffers (&buffers)[kNumDtypes], const float (&grad_scale)[kNumDtypes],
                             const AdamScalarRow* rows, int num_rows, int64_t* steps, const StepStats* stats) {
  if (stats->skip) return;
  const float clip = static_cast<float>(stats->clip_coef);
  for (int k = 0; k < num_rows; ++k) {
    const AdamScalarRow& r = rows[k];
    if (!r.active) continue;
    const AdamDerived d = adam_derive(r, ++steps[k]);
    adam_row(buffers[r.dtype], r, d, clip * grad_scale[r.dtype]);
  }
}

}  // namespace dmuon
