// Replicated AdamW on the CPU backend against the float64 reference: fp32 and
// bf16 parameters, a different gradient on every rank (the library must match
// the reference run on the averaged gradient), bitwise-equal parameters on
// every rank after each step, no-grad skipping, and setters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "support/reference.hpp"

namespace {

struct Spec {
  const char* name;
  int dtype;
  std::vector<int64_t> shape;
};

const std::vector<Spec> kModel = {
    {"w_fp32", DMUON_DTYPE_FP32, {7, 5}},
    {"b_fp32", DMUON_DTYPE_FP32, {13}},
    {"w_bf16", DMUON_DTYPE_BF16, {4, 9}},
    {"gain", DMUON_DTYPE_FP32, {1}},
    {"emb_bf16", DMUON_DTYPE_BF16, {3, 2, 5}},
};

int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (auto e : s.shape) n *= e;
  return n;
}

struct Fixture {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  Fixture(const dmuon_options_t& o) {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    dmuon_context_rank(ctx, &rank, &world);
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS);
    for (const Spec& s : kModel)
      EXPECT_EQ(dmuon_register(opt, s.name, DMUON_KIND_ADAM, s.dtype, static_cast<int>(s.shape.size()),
                               s.shape.data(), 1.0, 1.0, nullptr),
                DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  }
  ~Fixture() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  void* data(int id) {
    void* p = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, id, &p, nullptr), DMUON_SUCCESS);
    return p;
  }
  void* grad(int id) {
    void* g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, id, nullptr, &g), DMUON_SUCCESS);
    return g;
  }
};

double rank_grad(int step, int rank, int param, int64_t i) { return ref::noise(7, step * 16 + rank, param, i); }

// Every rank's bytes of every parameter equal rank 0's.
void expect_identical_across_ranks(Fixture& f) {
  for (std::size_t k = 0; k < kModel.size(); ++k) {
    const std::size_t bytes = numel(kModel[k]) * (kModel[k].dtype == DMUON_DTYPE_FP32 ? 4 : 2);
    std::vector<char> mine(bytes), root(bytes);
    std::memcpy(mine.data(), f.data(static_cast<int>(k)), bytes);
    root = mine;
    MPI_Bcast(root.data(), static_cast<int>(bytes), MPI_CHAR, 0, MPI_COMM_WORLD);
    EXPECT_EQ(std::memcmp(mine.data(), root.data(), bytes), 0) << kModel[k].name << " differs from rank 0";
  }
}

void run_against_reference(const dmuon_options_t& o, int steps) {
  Fixture f(o);
  std::vector<std::vector<double>> p(kModel.size());
  std::vector<ref::AdamState> state(kModel.size());
  for (std::size_t k = 0; k < kModel.size(); ++k) {
    p[k].resize(numel(kModel[k]));
    for (int64_t i = 0; i < numel(kModel[k]); ++i) p[k][i] = ref::round_to(kModel[k].dtype, ref::noise(1, k, i));
    ref::store(f.data(static_cast<int>(k)), kModel[k].dtype, p[k]);
  }
  for (int step = 0; step < steps; ++step) {
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      const int dt = kModel[k].dtype;
      std::vector<double> mine(p[k].size()), avg(p[k].size(), 0.0);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        mine[i] = ref::round_to(dt, rank_grad(step, f.rank, k, i));
        for (int r = 0; r < f.world; ++r) avg[i] += ref::round_to(dt, rank_grad(step, r, k, i)) / f.world;
        avg[i] = ref::round_to(dt, avg[i]);  // the library averages into the storage dtype
      }
      ref::store(f.grad(static_cast<int>(k)), dt, mine);
      ref::adamw_step(p[k], avg, state[k], o.adam_lr, o.adam_beta1, o.adam_beta2, o.adam_eps, o.adam_weight_decay);
      for (double& x : p[k]) x = ref::round_to(dt, x);
    }
    ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS) << dmuon_context_last_error(f.ctx);
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      const int dt = kModel[k].dtype;
      const auto got = ref::load(f.data(static_cast<int>(k)), dt, numel(kModel[k]));
      // fp32: arithmetic differences only; bf16: one storage ulp per step can flip.
      const double rtol = dt == DMUON_DTYPE_FP32 ? 2e-5 : (step + 1) * 8e-3;
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], p[k][i], rtol * std::fabs(p[k][i]) + 1e-6)
            << kModel[k].name << "[" << i << "] step " << step;
    }
    expect_identical_across_ranks(f);
  }
  int64_t count = 0;
  EXPECT_EQ(dmuon_get_step_count(f.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, steps);
}

TEST(Adam, MatchesFloat64ReferenceDefaults) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  run_against_reference(o, 6);
}

TEST(Adam, MatchesFloat64ReferenceLargeStepsAndDecay) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.adam_lr = 0.05;
  o.adam_beta1 = 0.8;
  o.adam_beta2 = 0.95;
  o.adam_eps = 1e-6;
  o.adam_weight_decay = 0.3;
  run_against_reference(o, 5);
}

TEST(Adam, NoGradParameterIsSkippedWhole) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Fixture f(o);
  std::vector<double> before = ref::load(f.data(1), DMUON_DTYPE_FP32, 13);
  for (std::size_t k = 0; k < kModel.size(); ++k)
    ref::store(f.grad(static_cast<int>(k)), kModel[k].dtype, std::vector<double>(numel(kModel[k]), 0.5));
  ASSERT_EQ(dmuon_mark_no_grad(f.opt, 1), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS);
  EXPECT_EQ(ref::load(f.data(1), DMUON_DTYPE_FP32, 13), before);  // untouched, decay included
  // The next step updates it as a first step (its own step count is 1, not 2).
  for (std::size_t k = 0; k < kModel.size(); ++k)
    ref::store(f.grad(static_cast<int>(k)), kModel[k].dtype, std::vector<double>(numel(kModel[k]), 0.5));
  ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS);
  std::vector<double> expect = before;
  ref::AdamState s;
  ref::adamw_step(expect, std::vector<double>(13, 0.5), s, o.adam_lr, o.adam_beta1, o.adam_beta2, o.adam_eps,
                  o.adam_weight_decay);
  const auto got = ref::load(f.data(1), DMUON_DTYPE_FP32, 13);
  for (int i = 0; i < 13; ++i) EXPECT_NEAR(got[i], expect[i], 1e-6);
}

TEST(Adam, SettersTakeEffectNextStep) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Fixture f(o);
  ASSERT_EQ(dmuon_set_lr(f.opt, DMUON_KIND_ADAM, 0.0), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_weight_decay(f.opt, DMUON_KIND_ADAM, 0.0), DMUON_SUCCESS);
  const auto before = ref::load(f.data(0), DMUON_DTYPE_FP32, 35);
  for (std::size_t k = 0; k < kModel.size(); ++k)
    ref::store(f.grad(static_cast<int>(k)), kModel[k].dtype, std::vector<double>(numel(kModel[k]), 1.0));
  ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS);
  EXPECT_EQ(ref::load(f.data(0), DMUON_DTYPE_FP32, 35), before);
  ASSERT_EQ(dmuon_set_lr(f.opt, DMUON_KIND_ADAM, 0.1), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_betas(f.opt, 0.5, 0.6), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_eps(f.opt, 1e-3), DMUON_SUCCESS);
  dmuon_options_t now;
  ASSERT_EQ(dmuon_get_options(f.opt, &now), DMUON_SUCCESS);
  EXPECT_EQ(now.adam_lr, 0.1);
  EXPECT_EQ(now.adam_beta1, 0.5);
  ASSERT_EQ(dmuon_step(f.opt), DMUON_SUCCESS);
  const auto after = ref::load(f.data(0), DMUON_DTYPE_FP32, 35);
  for (int i = 0; i < 35; ++i) EXPECT_LT(after[i], before[i]);  // positive gradient, lr now 0.1
  // An invalid setter value is refused and changes nothing.
  EXPECT_EQ(dmuon_set_betas(f.opt, 1.5, 0.6), DMUON_ERR_INVALID_VALUE);
  ASSERT_EQ(dmuon_get_options(f.opt, &now), DMUON_SUCCESS);
  EXPECT_EQ(now.adam_beta1, 0.5);
}

TEST(Adam, ExternalGradientsAreGatheredEachStep) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Fixture a(o), b(o);
  std::vector<float> ext(35);
  for (int i = 0; i < 35; ++i) ext[i] = static_cast<float>(ref::noise(3, a.rank, i));
  std::memcpy(a.grad(0), ext.data(), 35 * 4);
  ASSERT_EQ(dmuon_set_external_grad(b.opt, 0, ext.data()), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_step(a.opt), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_step(b.opt), DMUON_SUCCESS);
  EXPECT_EQ(std::memcmp(a.data(0), b.data(0), 35 * 4), 0);
}

}  // namespace
