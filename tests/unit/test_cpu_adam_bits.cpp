// The CPU Adam pass gives the bits of a plain scalar loop over adam_element,
// whichever clone of it (baseline, AVX2, AVX-512) the loader chose for this
// CPU: a result must not depend on which node of an allocation computed it.
// This file is compiled like cpu_adam.cpp, without fused multiply-adds, so the
// loop below is the reference every clone has to match.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/backend.hpp"
#include "core/scalar_table.hpp"
#include "core/step_stats.hpp"

using namespace dmuon;

namespace {

// Values over many binades, tiny ones included, so that any difference in
// rounding (a fused multiply-add, another operation order) shows in the bits.
std::vector<float> spread_values(int64_t n, unsigned seed, float lo_exp, float hi_exp) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f), expo(lo_exp, hi_exp);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = (neg(gen) ? -1.0f : 1.0f) * mant(gen) * std::exp2(expo(gen));
  return v;
}

AdamScalarRow make_row(int64_t offset, int64_t numel, Dtype dtype, float lr, float wd) {
  AdamScalarRow r{};
  r.offset = offset;
  r.numel = numel;
  r.dtype = static_cast<int32_t>(dtype);
  r.active = 1;
  r.beta1 = 0.9f;
  r.beta2 = 0.95f;
  r.eps = 1e-8f;
  r.lr = lr;
  r.weight_decay = wd;
  return r;
}

TEST(CpuAdamBits, EveryRowMatchesTheScalarLoopBitForBit) {
  std::unique_ptr<Backend> be = make_cpu_backend(MPI_COMM_SELF);
  // Two rows per dtype whose lengths leave vector tails, the second starting
  // at an offset that is no multiple of a vector width; the bf16 rows are
  // longer than the pass's widening block.
  const int64_t len[2] = {1031, 2500};
  std::vector<AdamScalarRow> rows;
  for (Dtype d : {Dtype::fp32, Dtype::bf16}) {
    rows.push_back(make_row(0, len[0], d, 3e-3f, 0.1f));
    rows.push_back(make_row(len[0] + 3, len[1], d, 1e-3f, 0.0f));
  }
  const int64_t elements = len[0] + 3 + len[1];
  const std::size_t count = static_cast<std::size_t>(elements);

  std::vector<float> p[kNumDtypes], g[kNumDtypes], m[kNumDtypes], v[kNumDtypes];
  for (int d = 0; d < kNumDtypes; ++d) {
    p[d] = spread_values(elements, 11u + d, -8, 2);
    g[d] = spread_values(elements, 23u + d, -30, 0);
    m[d] = spread_values(elements, 37u + d, -30, -2);
    v[d] = spread_values(elements, 41u + d, -60, -4);
    for (auto& e : v[d]) e = std::fabs(e);
  }
  std::vector<uint16_t> p16(count), g16(count);
  for (std::size_t i = 0; i < count; ++i) {
    p16[i] = float_to_bf16(p[1][i]);
    g16[i] = float_to_bf16(g[1][i]);
    p[1][i] = bf16_to_float(p16[i]);  // what the bf16 pass starts from
    g[1][i] = bf16_to_float(g16[i]);
  }
  // A few NaN gradients (one signalling) in the second bf16 row: the
  // vectorised pass must give the scalar loop's bits, a quiet NaN with the
  // gradient's payload in the parameter and both moments.
  for (const uint16_t nan : {uint16_t{0x7fa1}, uint16_t{0xffc3}, uint16_t{0x7fff}}) {
    const std::size_t k = static_cast<std::size_t>(len[0] + 3 + 97 * (nan & 0xf));
    g16[k] = nan;
    g[1][k] = bf16_to_float(nan);
  }

  // The reference, on copies, before the pass overwrites the inputs.
  const float clip = 0.75f, grad_scale[kNumDtypes] = {0.5f, 1.0f};
  const int64_t steps_before = 4;
  std::vector<float> want_p[kNumDtypes], want_m[kNumDtypes], want_v[kNumDtypes];
  for (int d = 0; d < kNumDtypes; ++d) {
    want_p[d] = p[d];
    want_m[d] = m[d];
    want_v[d] = v[d];
  }
  for (const AdamScalarRow& r : rows) {
    const int d = r.dtype;
    const AdamDerived derived = adam_derive(r, steps_before + 1);
    const float factor = clip * grad_scale[d];
    for (int64_t i = r.offset; i < r.offset + r.numel; ++i) {
      const std::size_t k = static_cast<std::size_t>(i);
      want_p[d][k] = adam_element(want_p[d][k], g[d][k] * factor, want_m[d][k], want_v[d][k], r, derived);
    }
  }

  AdamBuffers buffers[kNumDtypes];
  buffers[0].param = p[0].data();
  buffers[0].grad = g[0].data();
  buffers[1].param = p16.data();
  buffers[1].grad = g16.data();
  for (int d = 0; d < kNumDtypes; ++d) {
    buffers[d].exp_avg = m[d].data();
    buffers[d].exp_avg_sq = v[d].data();
    buffers[d].elements = elements;
  }
  std::vector<int64_t> steps(rows.size(), steps_before);
  StepStats stats{};
  stats.clip_coef = clip;
  be->adam_update(buffers, grad_scale, rows.data(), static_cast<int>(rows.size()), steps.data(), &stats);

  for (int d = 0; d < kNumDtypes; ++d) {
    SCOPED_TRACE(d == 0 ? "fp32" : "bf16");
    EXPECT_EQ(std::memcmp(m[d].data(), want_m[d].data(), count * 4), 0) << "first moments differ";
    EXPECT_EQ(std::memcmp(v[d].data(), want_v[d].data(), count * 4), 0) << "second moments differ";
  }
  EXPECT_EQ(std::memcmp(p[0].data(), want_p[0].data(), count * 4), 0) << "fp32 parameters differ";
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(p16[i], float_to_bf16(want_p[1][i])) << "bf16 parameter " << i;
  for (int64_t s : steps) EXPECT_EQ(s, steps_before + 1);
}

}  // namespace
