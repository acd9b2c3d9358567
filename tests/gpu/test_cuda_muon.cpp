// Muon on the "cuda" backend: each step's update against the float64
// reference (bf16 Newton-Schulz tolerance), through the fused small-matrix
// kernel and through the GEMMs, against the "cpu" backend when it has Muon,
// and per-shape CUDA-graph replay bitwise equal to eager execution,
// including the loud eager fallback after a failed capture.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "backends/cuda/cuda_ns_fused.hpp"
#include "gpu/gpu_backend.hpp"

namespace {

using gputest::cuda_of;
using gputest::key_of;
using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kMuonModel = {
    {"sq_a", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 96}},  // three of one shape: one batch
    {"sq_b", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 96}},
    {"sq_c", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 96}},
    {"tall_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {96, 48}},
    {"square", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 128}},
    {"wide_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {32, 200}},
    {"hidden_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {256, 256}},  // the 4x256 MLP's hidden shape
    {"tall_mid", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {200, 72}},  // read as its transpose
    {"tall_fp32", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {300, 40}},
    {"odd_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {20, 50}},   // fused, padded to 32 x 64
    {"tall_odd", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {100, 36}},  // fused, read as its transpose
    {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {50}},
};

dmuon_options_t muon_options() {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = 0.1;  // steps well above bf16 storage resolution of the parameters
  o.muon_weight_decay = 0.05;
  return o;
}

// Each step from the GPU's own previous parameters: the update the GPU made
// against the update the float64 reference makes from the same state.
void check_against_reference(const dmuon_options_t& o, int steps) {
  Model gpu("cuda", kMuonModel, o);
  gpu.init();
  std::vector<ref::MuonState> st(kMuonModel.size());
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<double>> before;
    for (std::size_t k = 0; k < kMuonModel.size(); ++k) before.push_back(gpu.get(int(k)));
    auto g = gpu.grads(step);
    ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS) << dmuon_context_last_error(gpu.ctx);
    for (std::size_t k = 0; k < kMuonModel.size(); ++k) {
      const Spec& s = kMuonModel[k];
      if (s.kind != DMUON_KIND_MUON) continue;
      std::vector<double> expect = before[k];
      ref::muon_step(expect, g[k], st[k], s.shape[0], s.shape[1], o);
      const auto got = gpu.get(int(k));
      double worst = 0, num = 0, den = 0, quant = 0;
      for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(expect[i] - before[k][i]));
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double dg = got[i] - before[k][i], dr = expect[i] - before[k][i];
        const double quantum = s.dtype == DMUON_DTYPE_BF16 ? std::fabs(expect[i]) / 128 : 1e-6;
        ASSERT_NEAR(dg, dr, 0.15 * worst + quantum) << s.name << "[" << i << "] step " << step;
        num += (dg - dr) * (dg - dr);
        den += dr * dr;
        quant += s.dtype == DMUON_DTYPE_BF16 ? (expect[i] / 256) * (expect[i] / 256) : 0.0;  // half an ulp
      }
      // 4% of the update (bf16 Newton-Schulz), plus the storage rounding of bf16 parameters.
      EXPECT_LT(std::sqrt(num), std::sqrt(0.04 * 0.04 * den + quant)) << s.name << " step " << step;
    }
  }
  // By default the shapes of at most kNsFusedMaxK x kNsFusedMaxN run the
  // fused kernel and the others the GEMMs; with the option off, all the GEMMs.
  std::istringstream lines(cuda_of(gpu).kernel_choices());
  for (std::string line; std::getline(lines, line);) {
    long r = 0, c = 0;
    if (std::sscanf(line.c_str(), "ns %ldx%ld", &r, &c) != 2) continue;
    const bool small = std::min(r, c) <= dmuon::kNsFusedMaxK && std::max(r, c) <= dmuon::kNsFusedMaxN;
    const bool fused = small && o.muon_ns_symmetric == DMUON_NS_SYMMETRIC_AUTO;
    EXPECT_NE(line.find(fused ? "gram=fused_small" : "gram=cublas_gemm"), std::string::npos) << line;
  }
}

TEST(CudaMuon, MatchesFloat64ReferenceNesterov) { check_against_reference(muon_options(), 4); }

TEST(CudaMuon, MatchesFloat64ReferencePlainMomentumPolarExpress) {
  dmuon_options_t o = muon_options();
  o.muon_nesterov = 0;
  o.muon_ns_schedule = DMUON_NS_POLAR_EXPRESS;
  o.muon_ns_steps = 6;
  o.muon_scale = DMUON_SCALE_MATCH_ADAMW_RMS;
  o.muon_lr = 0.02;
  check_against_reference(o, 3);
}

// The GEMM path of the same shapes (the default for larger ones), with an
// even number of iterations so the result ends in the other workspace.
TEST(CudaMuon, PlainGemmsMatchFloat64Reference) {
  dmuon_options_t o = muon_options();
  o.muon_ns_symmetric = DMUON_NS_SYMMETRIC_OFF;
  o.muon_ns_steps = 4;
  check_against_reference(o, 3);
}

TEST(CudaMuon, MatchesCpuBackend) {
  const dmuon_options_t o = muon_options();
  Model cpu("cpu", kMuonModel, o), gpu("cuda", kMuonModel, o);
  cpu.init();
  gpu.init();
  for (int step = 0; step < 3; ++step) {
    cpu.grads(step);
    gpu.grads(step);
    const int rc = dmuon_step(cpu.opt);
    if (rc == DMUON_ERR_NOT_SUPPORTED) GTEST_SKIP() << "the cpu backend has no Muon in this build";
    ASSERT_EQ(rc, DMUON_SUCCESS) << dmuon_context_last_error(cpu.ctx);
    ASSERT_EQ(dmuon_step(gpu.opt), DMUON_SUCCESS) << dmuon_context_last_error(gpu.ctx);
    for (std::size_t k = 0; k < kMuonModel.size(); ++k) {
      const auto a = gpu.get(int(k)), c = cpu.get(int(k));
      // Different arithmetic (bf16 vs fp32 Newton-Schulz): within bf16 tolerance of the step size.
      const double step_size = o.muon_lr * 3;
      for (std::size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], c[i], 0.1 * step_size * (step + 1) + std::fabs(c[i]) / 128) << kMuonModel[k].name << "[" << i << "]";
    }
  }
}

// Same inputs, graphs off and on: every parameter byte equal after each step,
// also across a learning-rate change (read from the device table on replay).
TEST(CudaMuon, GraphReplayIsBitwiseEager) {
  dmuon_options_t eager_o = muon_options(), graph_o = muon_options();
  eager_o.cuda_graphs = 0;
  Model eager("cuda", kMuonModel, eager_o), graph("cuda", kMuonModel, graph_o);
  eager.init();
  graph.init();
  for (int step = 0; step < 5; ++step) {
    if (step == 3) {
      ASSERT_EQ(dmuon_set_lr(eager.opt, DMUON_KIND_MUON, 0.03), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_set_lr(graph.opt, DMUON_KIND_MUON, 0.03), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_set_momentum(eager.opt, 0.9), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_set_momentum(graph.opt, 0.9), DMUON_SUCCESS);
    }
    eager.grads(step);
    graph.grads(step);
    ASSERT_EQ(dmuon_step(eager.opt), DMUON_SUCCESS) << dmuon_context_last_error(eager.ctx);
    ASSERT_EQ(dmuon_step(graph.opt), DMUON_SUCCESS) << dmuon_context_last_error(graph.ctx);
    for (std::size_t k = 0; k < kMuonModel.size(); ++k)
      ASSERT_EQ(graph.raw(int(k)), eager.raw(int(k))) << kMuonModel[k].name << " step " << step;
  }
  const auto d = cuda_of(graph).diagnostics(key_of(graph));
  EXPECT_EQ(d.shape_graphs, graph.owned_batches());  // one per (dtype, shape) batch this rank owns
  EXPECT_EQ(d.shape_fallbacks, 0);
  EXPECT_EQ(cuda_of(eager).diagnostics(key_of(eager)).shape_graphs, 0);
  EXPECT_NE(cuda_of(graph).kernel_choices().find("run=graph"), std::string::npos) << cuda_of(graph).kernel_choices();
}

TEST(CudaMuon, FailedCaptureFallsBackLoudlyToEager) {
  dmuon_options_t eager_o = muon_options();
  eager_o.cuda_graphs = 0;
  Model eager("cuda", kMuonModel, eager_o), graph("cuda", kMuonModel, muon_options());
  eager.init();
  graph.init();
  for (int step = 0; step < 3; ++step) {
    if (step == 1) cuda_of(graph).fail_next_shape_capture_for_testing();  // step 1 captures
    eager.grads(step);
    graph.grads(step);
    ASSERT_EQ(dmuon_step(eager.opt), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_step(graph.opt), DMUON_SUCCESS) << dmuon_context_last_error(graph.ctx);
    for (std::size_t k = 0; k < kMuonModel.size(); ++k)
      ASSERT_EQ(graph.raw(int(k)), eager.raw(int(k))) << kMuonModel[k].name << " step " << step;
  }
  const auto d = cuda_of(graph).diagnostics(key_of(graph));
  // The first capture of a rank that runs any batch fails; its other batches capture.
  const int batches = graph.owned_batches(), failed = batches > 0 ? 1 : 0;
  EXPECT_EQ(d.shape_fallbacks, failed);
  EXPECT_EQ(d.shape_graphs, batches - failed);
  if (failed)
    EXPECT_NE(cuda_of(graph).kernel_choices().find("capture failed"), std::string::npos) << cuda_of(graph).kernel_choices();
}

}  // namespace
