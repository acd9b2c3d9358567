// Sharded Muon on the CPU backend, mixed with replicated Adam, against the
// float64 reference (tests/support/reference.cpp): a different gradient on
// every rank, the library matching the reference run on the averaged gradient,
// bitwise-equal parameters on every rank after each step. Run at 1..4 ranks
// with seven matrices, so the plan spreads them unevenly.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "core/plan.hpp"  // align_up: the layout rule the state size follows
#include "muon_model.hpp"

namespace {

using muon_test::Model;
using muon_test::model;

// Indices into model().
constexpr std::size_t kWide = 0, kBias = 1, kTall = 2, kSqBf16 = 3, kThin = 7;

TEST(Muon, MatchesFloat64ReferenceDefaults) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_weight_decay = 0.1;
  Model m(o);
  // Step 0 gives w_thin a zero gradient: the normalisation's eps keeps its
  // update zero (decay only) instead of 0/0.
  m.step_and_check(0, 1.0, {}, {kThin});
  for (int step = 1; step < 4; ++step) m.step_and_check(step);
  int64_t count = 0;
  EXPECT_EQ(dmuon_get_step_count(m.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, 4);
  if (m.rank == 0) RecordProperty("max_rel_error", std::to_string(m.max_rel_error));
}

TEST(Muon, PlainMomentumPolarExpressAdamWRmsScale) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_nesterov = 0;
  o.muon_ns_schedule = DMUON_NS_POLAR_EXPRESS;
  o.muon_ns_steps = 9;  // one past the published list: the last polynomial repeats
  o.muon_scale = DMUON_SCALE_MATCH_ADAMW_RMS;
  o.muon_weight_decay = 0.05;
  o.muon_lr = 0.01;
  Model m(o);
  for (int step = 0; step < 3; ++step) m.step_and_check(step);
}

TEST(Muon, PolarExpressFewerStepsThanTheList) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_ns_schedule = DMUON_NS_POLAR_EXPRESS;
  o.muon_ns_steps = 5;  // all five with the safety factor
  Model m(o);
  for (int step = 0; step < 2; ++step) m.step_and_check(step);
}

TEST(Muon, NoGradMatrixKeepsParametersAndMomentum) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_weight_decay = 0.1;
  Model m(o);
  m.step_and_check(0);
  const auto tall = m.raw(kTall), sq = m.raw(kSqBf16);
  // The reference skips them too: if the library touched their momentum, step 2 would differ.
  m.step_and_check(1, 1.0, {kTall, kSqBf16, kBias});
  EXPECT_EQ(m.raw(kTall), tall);  // untouched, decay included
  EXPECT_EQ(m.raw(kSqBf16), sq);
  m.step_and_check(2);
}

TEST(Muon, SettersTakeEffectNextStep) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Model m(o);
  m.step_and_check(0);
  ASSERT_EQ(dmuon_set_momentum(m.opt, 0.8), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_lr(m.opt, DMUON_KIND_MUON, 0.05), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_weight_decay(m.opt, DMUON_KIND_MUON, 0.2), DMUON_SUCCESS);
  m.opts.muon_momentum = 0.8;
  m.opts.muon_lr = 0.05;
  m.opts.muon_weight_decay = 0.2;
  dmuon_options_t now;
  ASSERT_EQ(dmuon_get_options(m.opt, &now), DMUON_SUCCESS);
  EXPECT_EQ(now.muon_momentum, 0.8);
  EXPECT_EQ(now.muon_lr, 0.05);
  EXPECT_EQ(now.adam_lr, o.adam_lr);  // the Adam group is another group
  m.step_and_check(1);
  // Refused values change nothing.
  EXPECT_EQ(dmuon_set_momentum(m.opt, 1.0), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_set_lr(m.opt, DMUON_KIND_MUON, -1.0), DMUON_ERR_INVALID_VALUE);
  ASSERT_EQ(dmuon_get_options(m.opt, &now), DMUON_SUCCESS);
  EXPECT_EQ(now.muon_momentum, 0.8);
  EXPECT_EQ(now.muon_lr, 0.05);
  m.step_and_check(2);
  // lr 0 and no decay: Muon matrices stay as they are.
  ASSERT_EQ(dmuon_set_lr(m.opt, DMUON_KIND_MUON, 0.0), DMUON_SUCCESS);
  m.opts.muon_lr = 0.0;
  const auto wide = m.raw(kWide);
  m.step_and_check(3);
  EXPECT_EQ(m.raw(kWide), wide);
}

TEST(Muon, ClipStatisticsMatchReference) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 2.0;
  Model m(o);
  for (int step = 0; step < 3; ++step) {
    // Full-size gradients are clipped; the small ones of step 1 are not.
    const double amp = step == 1 ? 0.01 : 1.0;
    m.write_grads(step, amp);
    const bool clipping = m.ref_clip() < 1.0;
    ASSERT_EQ(clipping, step != 1) << "the test's gradients no longer straddle max_grad_norm";
    m.sync_reference_params();
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    m.reference_step();
    dmuon_clip_stats_t s;
    ASSERT_EQ(dmuon_get_clip_stats(m.opt, &s), DMUON_SUCCESS);
    EXPECT_NEAR(s.total_norm, m.ref_norm(), 1e-6 * m.ref_norm());
    EXPECT_NEAR(s.clip_coef, m.ref_clip(), 1e-6);
    EXPECT_EQ(s.clipped, clipping ? 1 : 0);
    EXPECT_EQ(s.found_inf, 0);
    EXPECT_EQ(s.step_skipped, 0);
    m.expect_matches_reference(("clipped step " + std::to_string(step)).c_str());
    m.expect_identical_across_ranks();
  }
}

// Momentum lives on the owner only: each rank holds one padded segment per
// dtype, the largest owner's share, not the whole set of matrices.
TEST(Muon, MomentumHeldOnlyByOwners) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Model m(o);
  const int world = m.world;
  std::vector<int> owners(model().size());
  std::vector<std::array<int64_t, 2>> owned(static_cast<std::size_t>(world), {0, 0});
  int64_t adam_elems = 0, muon_elems = 0;
  for (std::size_t k = 0; k < model().size(); ++k) {
    ASSERT_EQ(dmuon_param_owner(m.opt, static_cast<int>(k), &owners[k]), DMUON_SUCCESS);
    const int64_t n = dmuon::align_up(muon_test::numel(model()[k]));
    if (model()[k].kind == DMUON_KIND_ADAM) {
      EXPECT_EQ(owners[k], -1) << model()[k].name;
      adam_elems += n;
      continue;
    }
    ASSERT_TRUE(owners[k] >= 0 && owners[k] < world) << model()[k].name;
    owned[static_cast<std::size_t>(owners[k])][static_cast<std::size_t>(model()[k].dtype)] += n;
    muon_elems += n;
  }
  // Every rank sees the same plan.
  std::vector<int> root = owners;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(owners, root);
  int64_t segments = 0;
  for (int d = 0; d < 2; ++d) {
    int64_t seg = 0;
    for (const auto& r : owned) seg = std::max(seg, r[static_cast<std::size_t>(d)]);
    segments += seg;
  }
  for (int r = 0; r < world; ++r) EXPECT_GT(owned[r][0] + owned[r][1], 0) << "rank " << r << " owns nothing";
  int64_t bytes = 0;
  ASSERT_EQ(dmuon_state_bytes(m.opt, &bytes), DMUON_SUCCESS);
  EXPECT_EQ(bytes, 4 * segments + 8 * adam_elems);
  if (world > 1) EXPECT_LT(4 * segments, 4 * muon_elems) << "Muon momentum is replicated";
}

// A non-finite gradient with skip_nonfinite = 1: the step changes nothing.
// Run a takes the bad step, run b does not; after the next finite step both
// must be bitwise equal, which they are only if the bad step left the Muon
// momentum, the Adam moments and the Adam step counts as they were.
void expect_bad_step_skipped(std::size_t param, int64_t element, int on_rank, double bad) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.skip_nonfinite = 1;
  o.max_grad_norm = 2.0;  // clipping active: a non-finite norm must still report clipped = 0
  o.muon_weight_decay = 0.1;
  Model a(o), b(o);
  a.step_and_check(0);
  b.step_and_check(0);
  std::vector<std::vector<char>> before(model().size());
  for (std::size_t k = 0; k < model().size(); ++k) before[k] = a.raw(k);
  a.write_grads(1, 1.0);
  a.poison_grad(param, std::min<int64_t>(element, muon_test::numel(model()[param]) - 1), on_rank % a.world, bad);
  ASSERT_EQ(dmuon_step(a.opt), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  dmuon_clip_stats_t s;
  ASSERT_EQ(dmuon_get_clip_stats(a.opt, &s), DMUON_SUCCESS);
  EXPECT_EQ(s.found_inf, 1);
  EXPECT_EQ(s.clipped, 0);
  EXPECT_EQ(s.step_skipped, 1);
  EXPECT_FALSE(std::isfinite(s.total_norm));
  for (std::size_t k = 0; k < model().size(); ++k) EXPECT_EQ(a.raw(k), before[k]) << model()[k].name << " changed";
  int64_t count = 0;
  EXPECT_EQ(dmuon_get_step_count(a.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, 1);
  // The next finite step: a (its reference never saw the bad step) and b agree.
  a.step_and_check(2);
  b.step_and_check(2);
  for (std::size_t k = 0; k < model().size(); ++k) EXPECT_EQ(a.raw(k), b.raw(k)) << model()[k].name;
  ASSERT_EQ(dmuon_get_clip_stats(a.opt, &s), DMUON_SUCCESS);
  EXPECT_EQ(s.found_inf, 0);
  EXPECT_EQ(s.step_skipped, 0);
  EXPECT_EQ(dmuon_get_step_count(a.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, 2);
}

TEST(Muon, InfInMuonGradientSkipsWholeStep) {
  expect_bad_step_skipped(kTall, 5, 3, INFINITY);
}

TEST(Muon, NanInAdamGradientSkipsWholeStep) {
  expect_bad_step_skipped(5 /* emb_bf16 */, 2, 0, NAN);
}

TEST(Muon, NegativeInfInBf16MatrixSkipsWholeStep) {
  expect_bad_step_skipped(kSqBf16, 17, 1, -INFINITY);
}

// With skip_nonfinite = 0 the step goes on, as torch.optim.Muon would: clip_coef
// stays 1 (found_inf = 1, clipped = 0), every other parameter gets its normal
// update, and the matrix whose gradient is non-finite becomes NaN as a whole
// (the Frobenius normalisation mixes every element) and stays NaN, since its
// momentum now holds the inf. The reference does the same, element for element.
TEST(Muon, NonFiniteWithoutSkipPoisonsOnlyThatMatrix) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 2.0;
  Model m(o);
  m.step_and_check(0);
  m.write_grads(1, 1.0);
  m.poison_grad(kTall, 5, m.world - 1, INFINITY);
  m.sync_reference_params();
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  m.reference_step();
  dmuon_clip_stats_t s;
  ASSERT_EQ(dmuon_get_clip_stats(m.opt, &s), DMUON_SUCCESS);
  EXPECT_EQ(s.found_inf, 1);
  EXPECT_EQ(s.clipped, 0);
  EXPECT_EQ(s.clip_coef, 1.0);
  EXPECT_EQ(s.step_skipped, 0);
  EXPECT_TRUE(std::isinf(s.total_norm) && std::isinf(m.ref_norm()));
  m.expect_matches_reference("step with inf");
  for (double x : m.params(kTall)) ASSERT_TRUE(std::isnan(x));
  m.expect_identical_across_ranks();
  m.step_and_check(2);  // still NaN there, every other parameter still as the reference
  for (double x : m.params(kTall)) ASSERT_TRUE(std::isnan(x));
  int64_t count = 0;
  EXPECT_EQ(dmuon_get_step_count(m.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, 3);
}

}  // namespace
