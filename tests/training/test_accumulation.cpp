// Gradient accumulation and dmuon_zero_grad: K micro-batches added into the
// views and one dmuon_step per micro-batch give the step of the mean gradient
// written by hand (clipping on, so the norm's 1/K is checked too); the calls
// before the K-th change nothing; the K-th leaves the gradients zeroed.
#include <cmath>

#include "training/training_model.hpp"

namespace {

using training::model;
using training::Model;
using training::numel;

constexpr int kMicro = 3;
constexpr int kSteps = 4;

dmuon_options_t clipped_options() {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 0.5;  // below the norms of these gradients: clipping is active
  return o;
}

TEST(Accumulation, MatchesTheMeanGradientWrittenByHand) {
  Model acc(clipped_options()), manual(clipped_options());
  ASSERT_EQ(dmuon_set_grad_accumulation(acc.opt, kMicro), DMUON_SUCCESS);
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> before = acc.params();
    for (int m = 0; m < kMicro; ++m) {
      for (std::size_t k = 0; k < model().size(); ++k) {
        float* g = acc.grad(k);
        const float* p = acc.data(k);
        for (int64_t i = 0; i < numel(model()[k]); ++i)
          g[i] += static_cast<float>(training::micro_grad(p[i], step, m, acc.rank, k, i));
      }
      ASSERT_EQ(dmuon_step(acc.opt), DMUON_SUCCESS) << dmuon_context_last_error(acc.ctx);
      int every = 0, pending = -1;
      ASSERT_EQ(dmuon_get_grad_accumulation(acc.opt, &every, &pending), DMUON_SUCCESS);
      EXPECT_EQ(every, kMicro);
      EXPECT_EQ(pending, (m + 1) % kMicro);
      if (m + 1 < kMicro) EXPECT_EQ(acc.params(), before) << "micro-batch " << m << " changed the parameters";
    }
    for (std::size_t k = 0; k < model().size(); ++k) {
      float* g = manual.grad(k);
      const float* p = manual.data(k);
      for (int64_t i = 0; i < numel(model()[k]); ++i) {
        double sum = 0;
        for (int m = 0; m < kMicro; ++m) sum += static_cast<float>(training::micro_grad(p[i], step, m, manual.rank, k, i));
        g[i] = static_cast<float>(sum / kMicro);
      }
    }
    ASSERT_EQ(dmuon_step(manual.opt), DMUON_SUCCESS);

    dmuon_clip_stats_t sa, sm;
    ASSERT_EQ(dmuon_get_clip_stats(acc.opt, &sa), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_get_clip_stats(manual.opt, &sm), DMUON_SUCCESS);
    EXPECT_NEAR(sa.total_norm, sm.total_norm, 1e-5 * sm.total_norm);
    EXPECT_NEAR(sa.clip_coef, sm.clip_coef, 1e-5);
    EXPECT_EQ(sa.clipped, 1);
    const std::vector<float> pa = acc.params(), pm = manual.params();
    for (std::size_t i = 0; i < pa.size(); ++i) ASSERT_NEAR(pa[i], pm[i], 2e-5) << "element " << i << " step " << step;
    for (std::size_t k = 0; k < model().size(); ++k)
      for (int64_t i = 0; i < numel(model()[k]); ++i) ASSERT_EQ(acc.grad(k)[i], 0.0f) << "gradient not zeroed";
  }
  int64_t steps = 0;
  ASSERT_EQ(dmuon_get_step_count(acc.opt, &steps), DMUON_SUCCESS);
  EXPECT_EQ(steps, kSteps);
}

TEST(Accumulation, ZeroGradClearsTheViewsAndTheCycle) {
  Model f(DMUON_OPTIONS_INIT);
  ASSERT_EQ(dmuon_set_grad_accumulation(f.opt, 2), DMUON_SUCCESS);
  for (std::size_t k = 0; k < model().size(); ++k)
    for (int64_t i = 0; i < numel(model()[k]); ++i) f.grad(k)[i] = 1.0f;
  ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS);  // one of two micro-batches
  // Changing the setting mid-cycle is refused and changes nothing.
  EXPECT_EQ(dmuon_set_grad_accumulation(f.opt, 4), DMUON_ERR_INVALID_VALUE);
  int every = 0, pending = 0;
  ASSERT_EQ(dmuon_get_grad_accumulation(f.opt, &every, &pending), DMUON_SUCCESS);
  EXPECT_EQ(every, 2);
  EXPECT_EQ(pending, 1);
  ASSERT_EQ(dmuon_zero_grad(f.opt), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_get_grad_accumulation(f.opt, nullptr, &pending), DMUON_SUCCESS);
  EXPECT_EQ(pending, 0);
  for (std::size_t k = 0; k < model().size(); ++k)
    for (int64_t i = 0; i < numel(model()[k]); ++i) ASSERT_EQ(f.grad(k)[i], 0.0f);
  EXPECT_EQ(dmuon_set_grad_accumulation(f.opt, 0), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_set_grad_accumulation(f.opt, 1), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_zero_grad(nullptr), DMUON_ERR_NULL_HANDLE);
}

TEST(Accumulation, ZeroGradBeforeFinalizeIsRefused) {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_zero_grad(opt), DMUON_ERR_NOT_FINALIZED);
  EXPECT_EQ(dmuon_set_grad_accumulation(opt, 3), DMUON_SUCCESS);  // kept until finalize
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
}

}  // namespace
