// What online training adds around the step, on the "cuda" backend, eager
// and with the whole-step CUDA graph: accumulation over two micro-batches
// equals a step on the mean (gradients zeroed by the step), metrics submitted
// from device memory are reduced on the step's stream, and a schedule's
// rates reach the step.
#include <cmath>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kSpecs = {
    {"w0", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 32}},
    {"w1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {48, 48}},
    {"b0", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {64}},
};

class CudaTraining : public ::testing::TestWithParam<int> {};

dmuon_options_t options(int step_graph) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.cuda_step_graph = step_graph;
  o.max_grad_norm = 0.5;
  return o;
}

TEST_P(CudaTraining, AccumulationMetricsAndSchedule) {
  Model acc("cuda", kSpecs, options(GetParam())), manual("cuda", kSpecs, options(GetParam()));
  ASSERT_TRUE(acc.device) << "no cuda backend";
  acc.init();
  manual.init();
  ASSERT_EQ(dmuon_set_grad_accumulation(acc.opt, 2), DMUON_SUCCESS);
  dmuon_lr_schedule_t s = DMUON_LR_SCHEDULE_INIT;
  s.kind = DMUON_LR_COSINE;
  s.base_lr = 0.02;
  s.warmup_steps = 2;
  s.total_steps = 6;
  ASSERT_EQ(dmuon_set_lr_schedule(acc.opt, DMUON_KIND_MUON, &s), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_lr_schedule(manual.opt, DMUON_KIND_MUON, &s), DMUON_SUCCESS);
  double* metrics = nullptr;
  ASSERT_EQ(cudaMalloc(&metrics, 2 * sizeof(double)), cudaSuccess);

  for (int step = 0; step < 6; ++step) {
    // Micro-batch 1 into zeroed views, then micro-batch 1 + 2 (the same as adding).
    const auto g1 = acc.grads(2 * step);
    ASSERT_EQ(dmuon_step(acc.opt), DMUON_SUCCESS) << dmuon_context_last_error(acc.ctx);
    const auto g2 = manual.grads(2 * step + 1);  // manual's views: scratch for g2
    std::vector<std::vector<double>> sum = g1, mean = g1;
    for (std::size_t k = 0; k < kSpecs.size(); ++k)
      for (std::size_t i = 0; i < g1[k].size(); ++i) sum[k][i] = g1[k][i] + g2[k][i], mean[k][i] = sum[k][i] / 2;
    for (std::size_t k = 0; k < kSpecs.size(); ++k) {
      acc.put(int(k), true, sum[k]);
      manual.put(int(k), true, mean[k]);
    }
    const double values[2] = {1.5 * step, 2.0};
    ASSERT_EQ(cudaMemcpy(metrics, values, sizeof values, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(dmuon_metrics_submit(acc.opt, 2, metrics, DMUON_METRICS_MEAN), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_step(acc.opt), DMUON_SUCCESS) << dmuon_context_last_error(acc.ctx);
    ASSERT_EQ(dmuon_step(manual.opt), DMUON_SUCCESS) << dmuon_context_last_error(manual.ctx);

    double reduced[2] = {0, 0};
    ASSERT_EQ(dmuon_metrics_get(acc.opt, 2, reduced), DMUON_SUCCESS);
    EXPECT_EQ(reduced[0], values[0]);
    EXPECT_EQ(reduced[1], values[1]);
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    ASSERT_EQ(dmuon_get_options(acc.opt, &o), DMUON_SUCCESS);
    const double want = step < 2 ? 0.02 * (step + 1) / 2 : 0.5 * 0.02 * (1 + std::cos(M_PI * (step - 2) / 4.0));
    EXPECT_NEAR(o.muon_lr, want, 1e-15) << "step " << step;
    for (std::size_t k = 0; k < kSpecs.size(); ++k) {
      const std::vector<double> a = acc.get(int(k)), m = manual.get(int(k));
      for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], m[i], 2e-5) << kSpecs[k].name << " step " << step;
      std::vector<float> grad(a.size());
      ASSERT_EQ(cudaMemcpy(grad.data(), acc.ptr(int(k), true), grad.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (float x : grad) ASSERT_EQ(x, 0.0f) << "the step did not zero " << kSpecs[k].name;
    }
  }
  cudaFree(metrics);
}

INSTANTIATE_TEST_SUITE_P(StepGraph, CudaTraining, ::testing::Values(0, 1));

}  // namespace
