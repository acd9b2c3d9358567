// Non-finite gradients over the whole optimizer state (parameters, Adam
// moments and per-parameter step counts, Muon momentum on the owners, the step
// count), every byte of it. test_muon covers the Muon side against the float64
// reference (a skipped step equals no step; a non-finite Muon gradient without
// the guard turns that matrix into NaN); this file covers what it does not:
//   - skip_nonfinite = 1 with clipping off, and with external gradients: no byte changes;
//   - skip_nonfinite = 0: an inf/NaN in an Adam gradient spoils exactly its own
//     elements (Adam is element-wise), for good; every other byte is what a clean
//     run gives, with clipping off (the norm is then never computed, found_inf
//     reads 0) and on (an infinite norm reports found_inf and does not clip).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "hardening/state_snapshot.hpp"
#include "mpi/muon_model.hpp"

namespace {

using muon_test::Model;
constexpr std::size_t kWide = 0, kBias = 1, kEmbBf16 = 5, kGain = 9;  // muon_test::model() order

dmuon_options_t opts(int skip, double max_norm) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.skip_nonfinite = skip;
  o.max_grad_norm = max_norm;
  o.muon_weight_decay = 0.1;  // decay would change parameters even with a zero update
  return o;
}

dmuon_clip_stats_t stats_of(Model& m) {
  dmuon_clip_stats_t s{};
  EXPECT_EQ(dmuon_get_clip_stats(m.opt, &s), DMUON_SUCCESS);
  return s;
}

int64_t steps_of(Model& m) {
  int64_t n = -1;
  EXPECT_EQ(dmuon_get_step_count(m.opt, &n), DMUON_SUCCESS);
  return n;
}

struct Bad {
  std::size_t param;
  int64_t element;
  double value;
};

class SkipNonFinite : public ::testing::TestWithParam<Bad> {};

// skip_nonfinite = 1 and no clipping: the guard alone computes the norm. The
// bad value is on the last rank only; every rank must skip.
TEST_P(SkipNonFinite, NoByteOfStateChanges) {
  const Bad bad = GetParam();
  Model m(opts(1, 0.0));
  m.write_grads(0, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  const hardening::Snapshot before = hardening::snapshot(m.opt);
  m.write_grads(1, 1.0);
  m.poison_grad(bad.param, bad.element, m.world - 1, bad.value);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  EXPECT_EQ(hardening::first_difference(before, hardening::snapshot(m.opt)), "");
  const dmuon_clip_stats_t s = stats_of(m);
  EXPECT_EQ(s.found_inf, 1);
  EXPECT_EQ(s.step_skipped, 1);
  EXPECT_EQ(s.clipped, 0);
  EXPECT_EQ(steps_of(m), 1);
  // And the optimizer goes on from where it was.
  m.write_grads(2, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  EXPECT_EQ(stats_of(m).step_skipped, 0);
  EXPECT_EQ(steps_of(m), 2);
  EXPECT_NE(hardening::first_difference(before, hardening::snapshot(m.opt)), "");
}

INSTANTIATE_TEST_SUITE_P(Hardening, SkipNonFinite,
                         ::testing::Values(Bad{kGain, 0, INFINITY}, Bad{kBias, 7, NAN},
                                           Bad{kEmbBf16, 3, -INFINITY}, Bad{kWide, 100, NAN}));

// The guard also sees gradients that come from the user's own arrays.
TEST(NonFinite, SkipCoversExternalGradients) {
  Model m(opts(1, 0.0));
  m.write_grads(0, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  const hardening::Snapshot before = hardening::snapshot(m.opt);
  std::vector<float> mine(12, 0.25f);  // b_wide: 12 fp32
  if (m.rank == 0) mine[4] = NAN;
  ASSERT_EQ(dmuon_set_external_grad(m.opt, static_cast<int>(kBias), mine.data()), DMUON_SUCCESS);
  m.write_grads(1, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  EXPECT_EQ(hardening::first_difference(before, hardening::snapshot(m.opt)), "");
  EXPECT_EQ(stats_of(m).step_skipped, 1);
  mine[4] = 0.5f;
  m.write_grads(2, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  EXPECT_EQ(stats_of(m).step_skipped, 0);
  EXPECT_EQ(steps_of(m), 2);
}

// Element `e` of an fp32 Adam parameter, in the flat Adam buffers.
int64_t flat_index(Model& m, std::size_t param, int64_t e) {
  return m.opt->impl.param(static_cast<int>(param)).offset + e;
}

// Compare two snapshots byte for byte except one fp32 Adam element, which must
// be spoiled in `bad` (parameter NaN, moments not finite).
void expect_only_element_spoiled(const hardening::Snapshot& bad, const hardening::Snapshot& clean, int64_t at) {
  ASSERT_EQ(bad.parts.size(), clean.parts.size());
  for (std::size_t i = 0; i < bad.parts.size(); ++i) {
    const std::string& name = bad.parts[i].first;
    std::vector<unsigned char> a = bad.parts[i].second, b = clean.parts[i].second;
    if (name.rfind("adam ", 0) == 0 && name.find("fp32") != std::string::npos) {
      ASSERT_GE(a.size(), static_cast<std::size_t>(at + 1) * 4);
      float x;
      std::memcpy(&x, &a[static_cast<std::size_t>(at) * 4], 4);
      if (name == "adam param fp32")
        EXPECT_TRUE(std::isnan(x)) << name << " = " << x;
      else
        EXPECT_FALSE(std::isfinite(x)) << name << " = " << x;
      std::memset(&a[static_cast<std::size_t>(at) * 4], 0, 4);  // set aside, compare the rest
      std::memset(&b[static_cast<std::size_t>(at) * 4], 0, 4);
    }
    EXPECT_TRUE(a == b) << name << " differs beyond the spoiled element";
  }
}

// skip_nonfinite = 0: run `bad` gets an inf in one Adam element on one rank,
// run `clean` the same gradients without it. Afterwards only that element
// differs, and it stays spoiled on the next (finite) step, because its moments
// hold the inf. The step counts advance as for any step. With clipping on, the
// clean run takes that one step unclipped, which is what `bad` must do too.
void expect_elementwise_damage(double max_norm, double value) {
  Model bad(opts(0, max_norm)), clean(opts(0, max_norm));
  const int64_t at = flat_index(bad, kBias, 7);
  for (int step = 0; step < 3; ++step) {
    bad.write_grads(step, 1.0);
    clean.write_grads(step, 1.0);
    if (step == 1) bad.poison_grad(kBias, 7, 0, value);
    ASSERT_EQ(dmuon_set_max_grad_norm(clean.opt, step == 1 ? 0.0 : max_norm), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_step(bad.opt), DMUON_SUCCESS) << dmuon_context_last_error(bad.ctx);
    ASSERT_EQ(dmuon_step(clean.opt), DMUON_SUCCESS);
    const dmuon_clip_stats_t s = stats_of(bad);
    if (step == 0) {
      EXPECT_EQ(hardening::first_difference(hardening::snapshot(bad.opt), hardening::snapshot(clean.opt)), "");
      continue;
    }
    expect_only_element_spoiled(hardening::snapshot(bad.opt), hardening::snapshot(clean.opt), at);
    EXPECT_EQ(s.step_skipped, 0);
    if (step == 1 || max_norm <= 0) {  // step 2 with clipping on clips as usual
      EXPECT_EQ(s.clipped, 0);
      EXPECT_EQ(s.clip_coef, 1.0);
    }
    if (max_norm > 0) {
      // The norm is computed: it sees the inf (step 1) or the NaN parameter's
      // finite gradient (step 2, the gradient itself is clean again).
      EXPECT_EQ(s.found_inf, step == 1 ? 1 : 0);
    } else {
      // Neither clipping nor the guard: the gradients are never summed, so
      // nothing is found and the norm reads -1.
      EXPECT_EQ(s.found_inf, 0);
      EXPECT_EQ(s.total_norm, -1.0);
    }
    EXPECT_EQ(steps_of(bad), step + 1);
  }
  bad.expect_identical_across_ranks();
}

TEST(NonFinite, WithoutGuardOrClippingInfSpoilsOnlyItsAdamElement) { expect_elementwise_damage(0.0, INFINITY); }
TEST(NonFinite, WithoutGuardOrClippingNanSpoilsOnlyItsAdamElement) { expect_elementwise_damage(0.0, NAN); }
// With clipping on, an infinite norm does not clip (clip_coef 1): every other
// element gets exactly the unclipped update of the clean run.
TEST(NonFinite, WithClippingInfNormDoesNotClipTheOthers) { expect_elementwise_damage(1e-3, INFINITY); }

}  // namespace
