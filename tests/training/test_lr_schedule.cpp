// Learning-rate schedules: the rate of every step of each kind (read back
// from dmuon_get_options) against values derived independently here, the
// setter's override, refused schedules, and a run that stops mid-schedule,
// restores from its checkpoint on one rank and follows the uninterrupted
// run's rates and losses.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "training/training_model.hpp"

namespace {

using training::model;
using training::Model;
using training::numel;

double muon_lr(dmuon_optimizer_t opt) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  EXPECT_EQ(dmuon_get_options(opt, &o), DMUON_SUCCESS);
  return o.muon_lr;
}
double adam_lr(dmuon_optimizer_t opt) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  EXPECT_EQ(dmuon_get_options(opt, &o), DMUON_SUCCESS);
  return o.adam_lr;
}

// Steps with zero gradients and returns the Muon rate each step used.
std::vector<double> muon_rates(Model& m, int steps) {
  std::vector<double> rates;
  for (int t = 0; t < steps; ++t) {
    EXPECT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    rates.push_back(muon_lr(m.opt));
  }
  return rates;
}

TEST(LrSchedule, WarmupThenCosineReachesItsLandmarks) {
  Model m(DMUON_OPTIONS_INIT);
  dmuon_lr_schedule_t s = DMUON_LR_SCHEDULE_INIT;
  s.kind = DMUON_LR_COSINE;
  s.base_lr = 0.04;
  s.warmup_steps = 4;
  s.total_steps = 12;  // 8 steps of cosine after the warm-up
  s.final_lr = 0.004;
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &s), DMUON_SUCCESS);
  const std::vector<double> r = muon_rates(m, 15);
  for (int t = 0; t < 4; ++t) EXPECT_DOUBLE_EQ(r[t], 0.04 * (t + 1) / 4) << "warm-up step " << t;
  EXPECT_DOUBLE_EQ(r[4], 0.04);                 // the cosine starts at its top
  EXPECT_NEAR(r[8], (0.04 + 0.004) / 2, 1e-15);  // half-way down
  for (int t = 5; t < 12; ++t) EXPECT_LT(r[t], r[t - 1]) << "decreasing at " << t;
  for (int t = 12; t < 15; ++t) EXPECT_NEAR(r[t], 0.004, 1e-15) << "held at final_lr at " << t;
  dmuon_lr_schedule_t back;
  int64_t taken = -1;
  ASSERT_EQ(dmuon_get_lr_schedule(m.opt, DMUON_KIND_MUON, &back, &taken), DMUON_SUCCESS);
  EXPECT_EQ(taken, 15);
  EXPECT_EQ(back.kind, DMUON_LR_COSINE);
  EXPECT_EQ(dmuon_get_lr_schedule(m.opt, DMUON_KIND_ADAM, &back, &taken), DMUON_ERR_NOT_FOUND);
}

TEST(LrSchedule, LinearPolynomialAndStep) {
  Model m(DMUON_OPTIONS_INIT);
  dmuon_lr_schedule_t lin = DMUON_LR_SCHEDULE_INIT;
  lin.kind = DMUON_LR_LINEAR;
  lin.base_lr = 1.0;
  lin.total_steps = 4;
  lin.final_lr = 0.2;
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &lin), DMUON_SUCCESS);
  dmuon_lr_schedule_t step = DMUON_LR_SCHEDULE_INIT;  // base_lr < 0: the group's rate now
  step.kind = DMUON_LR_STEP;
  step.step_size = 2;
  step.gamma = 0.5;
  step.warmup_steps = 1;
  ASSERT_EQ(dmuon_set_lr(m.opt, DMUON_KIND_ADAM, 0.008), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_ADAM, &step), DMUON_SUCCESS);
  const double want_muon[] = {1.0, 0.8, 0.6, 0.4, 0.2, 0.2};
  const double want_adam[] = {0.008, 0.008, 0.008, 0.004, 0.004, 0.002};
  for (int t = 0; t < 6; ++t) {
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
    EXPECT_NEAR(muon_lr(m.opt), want_muon[t], 1e-15) << "linear, step " << t;
    EXPECT_DOUBLE_EQ(adam_lr(m.opt), want_adam[t]) << "step decay, step " << t;
  }
  dmuon_lr_schedule_t poly = DMUON_LR_SCHEDULE_INIT;
  poly.kind = DMUON_LR_POLYNOMIAL;
  poly.base_lr = 0.5;
  poly.total_steps = 4;
  poly.power = 2;
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &poly), DMUON_SUCCESS);  // restarts at its step 0
  const double want_poly[] = {0.5, 0.5 * 0.5625, 0.5 * 0.25, 0.5 * 0.0625, 0.0};
  for (int t = 0; t < 5; ++t) {
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
    EXPECT_NEAR(muon_lr(m.opt), want_poly[t], 1e-15) << "polynomial, step " << t;
  }
}

TEST(LrSchedule, TheSetterOverridesAndBadSchedulesAreRefused) {
  Model m(DMUON_OPTIONS_INIT);
  dmuon_lr_schedule_t s = DMUON_LR_SCHEDULE_INIT;
  s.kind = DMUON_LR_CONSTANT;
  s.base_lr = 0.3;
  s.warmup_steps = 10;
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &s), DMUON_SUCCESS);
  muon_rates(m, 2);
  EXPECT_DOUBLE_EQ(muon_lr(m.opt), 0.3 * 2 / 10);

  dmuon_lr_schedule_t bad = s;
  bad.kind = DMUON_LR_COSINE;
  bad.total_steps = 10;  // not beyond the warm-up
  EXPECT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &bad), DMUON_ERR_INVALID_VALUE);
  bad = s;
  bad.kind = 7;
  EXPECT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &bad), DMUON_ERR_INVALID_VALUE);
  bad = s;
  bad.kind = DMUON_LR_STEP;
  bad.step_size = 0;
  EXPECT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &bad), DMUON_ERR_INVALID_VALUE);
  bad = s;
  bad.magic = 0;
  EXPECT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &bad), DMUON_ERR_OPTIONS_VERSION);
  EXPECT_EQ(dmuon_set_lr_schedule(m.opt, 5, &s), DMUON_ERR_INVALID_KIND);
  int64_t taken = 0;
  ASSERT_EQ(dmuon_get_lr_schedule(m.opt, DMUON_KIND_MUON, nullptr, &taken), DMUON_SUCCESS);
  EXPECT_EQ(taken, 2) << "a refused schedule replaced the one in place";

  ASSERT_EQ(dmuon_set_lr(m.opt, DMUON_KIND_MUON, 0.01), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_get_lr_schedule(m.opt, DMUON_KIND_MUON, nullptr, nullptr), DMUON_ERR_NOT_FOUND);
  muon_rates(m, 2);
  EXPECT_DOUBLE_EQ(muon_lr(m.opt), 0.01) << "the setter's rate holds after it";
}

// ------------------------------------------------------------------ restart on another rank count

constexpr int kTotal = 14, kStop = 6;

void set_schedules(Model& m) {
  dmuon_lr_schedule_t muon = DMUON_LR_SCHEDULE_INIT;
  muon.kind = DMUON_LR_COSINE;
  muon.base_lr = 0.05;
  muon.warmup_steps = 3;
  muon.total_steps = kTotal;
  muon.final_lr = 0.005;
  dmuon_lr_schedule_t adam = DMUON_LR_SCHEDULE_INIT;
  adam.kind = DMUON_LR_STEP;
  adam.base_lr = 0.02;
  adam.warmup_steps = 2;
  adam.step_size = 3;
  adam.gamma = 0.7;
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_MUON, &muon), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_set_lr_schedule(m.opt, DMUON_KIND_ADAM, &adam), DMUON_SUCCESS);
}

// 0.5 |p - target|^2 over the model; the gradient is the same on every rank,
// so the run does not depend on the rank count.
double write_gradient_and_loss(Model& m) {
  double loss = 0;
  for (std::size_t k = 0; k < model().size(); ++k)
    for (int64_t i = 0; i < numel(model()[k]); ++i) {
      const double d = m.data(k)[i] - 0.5 * ref::noise(5, k, i);
      m.grad(k)[i] = static_cast<float>(d);
      loss += 0.5 * d * d;
    }
  return loss;
}

struct Trace {
  std::vector<double> muon, adam, loss;
};

void run_steps(Model& m, int steps, Trace& trace) {
  for (int t = 0; t < steps; ++t) {
    trace.loss.push_back(write_gradient_and_loss(m));
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    trace.muon.push_back(muon_lr(m.opt));
    trace.adam.push_back(adam_lr(m.opt));
  }
}

TEST(LrSchedule, RestartOnAnotherRankCountFollowsTheUninterruptedRun) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path = training::shared_temp_dir("dmuon_lr_schedule_");
  ASSERT_FALSE(path.empty());
  const char* dir = path.c_str();

  Trace whole;
  {
    Model m(DMUON_OPTIONS_INIT);
    set_schedules(m);
    run_steps(m, kTotal, whole);
  }
  Trace first;
  {
    Model m(DMUON_OPTIONS_INIT);
    set_schedules(m);
    run_steps(m, kStop, first);
    ASSERT_EQ(dmuon_checkpoint_save(m.opt, dir, kStop, nullptr), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  }
  // The continuation runs on rank 0 alone, with no schedule of its own: the
  // checkpoint brings them, with their step counts.
  MPI_Comm solo = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &solo);
  if (solo != MPI_COMM_NULL) {
    Trace rest = first;
    {
      Model m(DMUON_OPTIONS_INIT, solo);
      int64_t user_step = 0;
      ASSERT_EQ(dmuon_checkpoint_restore(m.opt, dir, &user_step), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
      EXPECT_EQ(user_step, kStop);
      int64_t taken = 0;
      ASSERT_EQ(dmuon_get_lr_schedule(m.opt, DMUON_KIND_MUON, nullptr, &taken), DMUON_SUCCESS);
      EXPECT_EQ(taken, kStop);
      run_steps(m, kTotal - kStop, rest);
    }
    for (int t = 0; t < kTotal; ++t) {
      EXPECT_EQ(rest.muon[t], whole.muon[t]) << "Muon rate of step " << t;
      EXPECT_EQ(rest.adam[t], whole.adam[t]) << "AdamW rate of step " << t;
      EXPECT_NEAR(rest.loss[t], whole.loss[t], 1e-5 * whole.loss[t]) << "loss before step " << t;
    }
    EXPECT_LT(whole.loss.back(), whole.loss.front()) << "the model did not learn";
    MPI_Comm_free(&solo);
    std::filesystem::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
