// Replicated AdamW on the "cuda" backend against the "cpu" backend and the
// float64 reference on identical inputs: fp32 and bf16 parameters (sizes that
// exercise the 16-byte vector path, its scalar tail and multi-chunk rows),
// no-grad skipping, setters, clipping statistics and the non-finite guard.
#include <cmath>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kAdamModel = {
    {"w_fp32", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {7, 5}},
    {"b_fp32", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {13}},
    {"w_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {4, 9}},
    {"gain", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}},
    {"emb_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {3, 2, 5}},
    {"big_fp32", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {70001}},  // several chunks and a ragged end
    {"big_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {257, 129}},
};

// Runs `steps` steps on both backends with the same data, checking the GPU
// against the CPU backend (arithmetic differences only) and the float64
// reference (bf16 storage ulps) after each.
void compare(const dmuon_options_t& o, int steps, double grad_scale, bool with_no_grad) {
  Model cpu("cpu", kAdamModel, o), gpu("cuda", kAdamModel, o);
  ASSERT_TRUE(gpu.device);
  cpu.init();
  gpu.init();
  std::vector<std::vector<double>> p;
  for (std::size_t k = 0; k < kAdamModel.size(); ++k) p.push_back(cpu.get(int(k)));
  std::vector<ref::AdamState> st(kAdamModel.size());
  for (int step = 0; step < steps; ++step) {
    auto g = cpu.grads(step, grad_scale);
    gpu.grads(step, grad_scale);
    const int skipped = with_no_grad && step == 1 ? 2 : -1;
    if (skipped >= 0) {
      ASSERT_EQ(dmuon_mark_no_grad(cpu.opt, skipped), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_mark_no_grad(gpu.opt, skipped), DMUON_SUCCESS);
    }
    // Reference: global norm over the gradients used, then clip, then AdamW.
    double sumsq = 0;
    for (std::size_t k = 0; k < g.size(); ++k)
      if (int(k) != skipped)
        for (double x : g[k]) sumsq += x * x;
    const double coef = o.max_grad_norm > 0 ? std::min(1.0, o.max_grad_norm / (std::sqrt(sumsq) + 1e-6)) : 1.0;
    for (std::size_t k = 0; k < g.size(); ++k) {
      if (int(k) == skipped) continue;
      std::vector<double> gc = g[k];
      for (double& x : gc) x *= coef;
      ref::adamw_step(p[k], gc, st[k], o.adam_lr, o.adam_beta1, o.adam_beta2, o.adam_eps, o.adam_weight_decay);
      for (double& x : p[k]) x = ref::round_to(kAdamModel[k].dtype, x);
    }
    ASSERT_EQ(dmuon_step(cpu.opt), DMUON_SUCCESS) << dmuon_context_last_error(cpu.ctx);
    ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS) << dmuon_context_last_error(gpu.ctx);
    for (std::size_t k = 0; k < kAdamModel.size(); ++k) {
      const bool bf16 = kAdamModel[k].dtype == DMUON_DTYPE_BF16;
      const auto a = gpu.get(int(k)), c = cpu.get(int(k));
      // GPU vs CPU: fp32 differs by FMA contraction only; bf16 may flip one ulp.
      // (an ulp flipped at one step carries into the next ones).
      const double tol_cpu = bf16 ? (step + 1) * 8e-3 : 1e-6;
      const double tol_ref = bf16 ? (step + 1) * 8e-3 : 2e-5;
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], c[i], tol_cpu * std::fabs(c[i]) + 1e-7) << kAdamModel[k].name << "[" << i << "] step " << step;
        ASSERT_NEAR(a[i], p[k][i], tol_ref * std::fabs(p[k][i]) + 1e-6) << kAdamModel[k].name << "[" << i << "] step " << step;
      }
    }
    dmuon_clip_stats_t sc, sg;
    ASSERT_EQ(dmuon_get_clip_stats(cpu.opt, &sc), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_get_clip_stats(gpu.opt, &sg), DMUON_SUCCESS);
    EXPECT_NEAR(sg.total_norm, sc.total_norm, 1e-9 * std::max(1.0, std::fabs(sc.total_norm)));
    EXPECT_NEAR(sg.clip_coef, sc.clip_coef, 1e-9);
    EXPECT_EQ(sg.clipped, sc.clipped);
    EXPECT_EQ(sg.found_inf, sc.found_inf);
    if (o.max_grad_norm > 0) EXPECT_NEAR(sg.total_norm, std::sqrt(sumsq), 1e-9 * std::sqrt(sumsq));
  }
  int64_t nc = 0, ng = 0;
  ASSERT_EQ(dmuon_get_step_count(cpu.opt, &nc), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_get_step_count(gpu.opt, &ng), DMUON_SUCCESS);
  EXPECT_EQ(ng, nc);
  EXPECT_EQ(ng, steps);
}

TEST(CudaAdam, MatchesCpuAndFloat64Defaults) { compare(dmuon_options_t DMUON_OPTIONS_INIT, 5, 1.0, false); }

TEST(CudaAdam, MatchesWithLargeStepsDecayAndNoGrad) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.adam_lr = 0.05;
  o.adam_beta1 = 0.8;
  o.adam_beta2 = 0.95;
  o.adam_eps = 1e-6;
  o.adam_weight_decay = 0.3;
  compare(o, 4, 1.0, true);
}

TEST(CudaAdam, ClippingStatisticsOnTheDevice) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 1.0;  // the test gradients have a norm of about 150: every step clips
  compare(o, 3, 1.0, false);
}

TEST(CudaAdam, NonFiniteGradientSkipsTheStep) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.skip_nonfinite = 1;
  Model gpu("cuda", kAdamModel, o);
  gpu.init();
  gpu.grads(0);
  ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS);
  std::vector<std::vector<char>> before;
  for (std::size_t k = 0; k < kAdamModel.size(); ++k) before.push_back(gpu.raw(int(k)));
  auto g = gpu.grads(1);
  g[1][3] = INFINITY;
  gpu.put(1, true, g[1]);
  ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS);
  dmuon_clip_stats_t s;
  ASSERT_EQ(dmuon_get_clip_stats(gpu.opt, &s), DMUON_SUCCESS);
  EXPECT_EQ(s.found_inf, 1);
  EXPECT_EQ(s.step_skipped, 1);
  EXPECT_EQ(s.clipped, 0);
  for (std::size_t k = 0; k < kAdamModel.size(); ++k) EXPECT_EQ(gpu.raw(int(k)), before[k]) << kAdamModel[k].name;
  int64_t n = 0;
  ASSERT_EQ(dmuon_get_step_count(gpu.opt, &n), DMUON_SUCCESS);
  EXPECT_EQ(n, 1);
  // The next finite step is the parameters' second step (bias corrections of t = 2).
  gpu.grads(2);
  ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_get_step_count(gpu.opt, &n), DMUON_SUCCESS);
  EXPECT_EQ(n, 2);
  EXPECT_NE(gpu.raw(0), before[0]);
}

// Clipping switched off and on between steps, eager and as a whole-step graph:
// a step without a norm leaves its statistics to the Adam kernel, which
// derives the factor itself; it must not apply a clipped step's factor, and
// the statistics and the step count must still match the CPU backend's.
TEST(CudaAdam, ClipSwitchedOffAndOnMatchesCpu) {
  for (int graph : {0, 1}) {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.cuda_step_graph = graph;
    Model cpu("cpu", kAdamModel, o), gpu("cuda", kAdamModel, o);
    ASSERT_TRUE(gpu.device);
    cpu.init();
    gpu.init();
    const double max_norm[] = {1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0};
    for (int step = 0; step < 8; ++step) {
      for (Model* m : {&cpu, &gpu}) {
        ASSERT_EQ(dmuon_set_max_grad_norm(m->opt, max_norm[step]), DMUON_SUCCESS);
        m->grads(step);
        ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
      }
      for (std::size_t k = 0; k < kAdamModel.size(); ++k) {
        const double tol = kAdamModel[k].dtype == DMUON_DTYPE_BF16 ? (step + 1) * 8e-3 : 1e-6;
        const auto a = gpu.get(int(k)), c = cpu.get(int(k));
        for (std::size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(a[i], c[i], tol * std::fabs(c[i]) + 1e-7)
              << kAdamModel[k].name << "[" << i << "] step " << step << " graph " << graph;
      }
      dmuon_clip_stats_t sc, sg;
      ASSERT_EQ(dmuon_get_clip_stats(cpu.opt, &sc), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_get_clip_stats(gpu.opt, &sg), DMUON_SUCCESS);
      EXPECT_NEAR(sg.total_norm, sc.total_norm, 1e-9 * std::max(1.0, std::fabs(sc.total_norm))) << "step " << step;
      EXPECT_NEAR(sg.clip_coef, sc.clip_coef, 1e-9) << "step " << step;
      EXPECT_EQ(sg.clipped, max_norm[step] > 0 ? 1 : 0) << "step " << step;
      EXPECT_EQ(sg.step_skipped, 0);
      int64_t nc = 0, ng = 0;
      ASSERT_EQ(dmuon_get_step_count(cpu.opt, &nc), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_get_step_count(gpu.opt, &ng), DMUON_SUCCESS);
      EXPECT_EQ(ng, step + 1);
      EXPECT_EQ(nc, step + 1);
    }
  }
}

}  // namespace
