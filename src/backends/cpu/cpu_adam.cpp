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
// compiled with -ffp-contract=off, so no clone contracts): every clone gives
// the same bits (test_cpu_adam_bits). Not under sanitizers, whose runtimes may
// start after the loader resolves the clones.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if __GNUC__ >= 11  // x86-64-v4: AVX-512 with VL and BW, so 32 vector registers and one-instruction narrowing
#define DMUON_ADAM_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DMUON_ADAM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#else
#define DMUON_ADAM_CLONES
#endif

// The element loop over fp32 parameters.
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

// bf16: each element is widened, updated in fp32 and rounded back in one
// loop, which vectorises (with -fno-math-errno). With master weights
// (kMaster) the update starts from the master (or the parameter the program
// wrote) and goes back to it before it is rounded.
template <bool kMaster>
inline void adam_span_bf16(uint16_t* __restrict p, const uint16_t* __restrict g, float* __restrict master,
                           float* __restrict m, float* __restrict v, int64_t n, const AdamScalarRow& row,
                           const AdamDerived& derived, float clip) {
  const AdamScalarRow r = row;
  const AdamDerived d = derived;
  for (int64_t i = 0; i < n; ++i) {
    float mi = m[i], vi = v[i];
    const float from = kMaster ? master_or_param(master[i], p[i]) : bf16_to_float(p[i]);
    const float pi = adam_element(from, bf16_to_float(g[i]) * clip, mi, vi, r, d);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kMaster) master[i] = pi;
    p[i] = float_to_bf16(pi);
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
  uint16_t* p = static_cast<uint16_t*>(b.param) + r.offset;
  const uint16_t* g = static_cast<const uint16_t*>(b.grad) + r.offset;
  if (b.master)
    adam_span_bf16<true>(p, g, b.master + r.offset, m, v, r.numel, r, d, clip);
  else
    adam_span_bf16<false>(p, g, nullptr, m, v, r.numel, r, d, clip);
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
