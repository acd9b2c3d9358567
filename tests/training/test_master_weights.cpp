// Master weights (options.master_weights) on the CPU backend: updates of
// 1e-4 relative size move a bf16 parameter as they move an fp32 one (the
// master takes the same IEEE operations as the fp32 parameter, so the bf16
// parameter is exactly its rounding), and without the option they vanish
// (each is below half a bf16 ulp). A value the program writes into the bf16
// view is read back by the next step; dmuon_broadcast_params re-reads every
// master; the option is part of the options struct's layout version 3.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "dmuon/dmuon.h"
#include "training/master_weights_model.hpp"

namespace {

using master_weights_test::kSteps;
using master_weights_test::Model;
using master_weights_test::ulp;

// Runs the fp32 twin and the bf16 run with and without masters side by side
// for kSteps steps of the same gradients; `write_at` > 0 writes a new value
// into every parameter's view (all three runs alike) before that step.
struct Trio {
  Model fp32, master, plain;
  Trio(int kind, MPI_Comm comm = MPI_COMM_WORLD)
      : fp32(comm, kind, DMUON_DTYPE_FP32, 0), master(comm, kind, DMUON_DTYPE_BF16, 1),
        plain(comm, kind, DMUON_DTYPE_BF16, 0) {}
  void run(int steps, int write_at = -1) {
    for (int s = 0; s < steps; ++s) {
      if (s == write_at)
        for (Model* r : {&fp32, &master, &plain}) r->write_params(0.75f);
      for (Model* r : {&fp32, &master, &plain}) r->step(s);
    }
  }
};

void expect_tracks_fp32(const Trio& t, const std::vector<float>& initial, int min_moved_ulps) {
  const std::vector<float> f = t.fp32.values(), m = t.master.values(), p = t.plain.values();
  int moved = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    // The master holds exactly the fp32 parameter: the bf16 one is its rounding.
    ASSERT_EQ(dmuon::float_to_bf16(m[i]), dmuon::float_to_bf16(f[i])) << "element " << i;
    ASSERT_LE(std::fabs(m[i] - f[i]), ulp(f[i])) << "element " << i;
    // Without masters every update was below half an ulp: nothing moved.
    ASSERT_EQ(p[i], initial[i]) << "element " << i << " moved without master weights";
    if (std::fabs(f[i] - initial[i]) >= min_moved_ulps * ulp(initial[i])) ++moved;
  }
  // The updates added up to several ulps on most elements: the test measures something.
  EXPECT_GE(moved, static_cast<int>(f.size()) / 2);
}

TEST(MasterWeights, AdamUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_ADAM);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 2);
}

TEST(MasterWeights, MuonUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_MUON);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 1);
}

TEST(MasterWeights, AValueWrittenIntoTheViewIsReadByTheNextStep) {
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    Trio t(kind);
    t.run(kSteps, kSteps / 2);
    // Had the masters kept their values, the bf16 run would have gone on from
    // the old ones and differ from the fp32 run by the size of the write.
    const std::vector<float> f = t.fp32.values(), m = t.master.values();
    for (std::size_t i = 0; i < f.size(); ++i)
      ASSERT_EQ(dmuon::float_to_bf16(m[i]), dmuon::float_to_bf16(f[i])) << "kind " << kind << " element " << i;
  }
}

TEST(MasterWeights, BroadcastParamsRereadsEveryMaster) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Model r(MPI_COMM_WORLD, DMUON_KIND_ADAM, DMUON_DTYPE_BF16, 1);
  // A learning rate per rank: the replicated masters drift apart by less than
  // half an ulp, so most bf16 parameters still agree across ranks.
  ASSERT_EQ(dmuon_set_lr(r.opt, DMUON_KIND_ADAM, master_weights_test::kAdamLr * (1 + 0.3 * rank)), DMUON_SUCCESS);
  for (int s = 0; s < 20; ++s) r.step(s);
  ASSERT_EQ(dmuon_broadcast_params(r.opt, 0), DMUON_SUCCESS) << dmuon_context_last_error(r.ctx);
  ASSERT_EQ(dmuon_set_lr(r.opt, DMUON_KIND_ADAM, master_weights_test::kAdamLr), DMUON_SUCCESS);
  for (int s = 0; s < kSteps; ++s) r.step(s);
  // Every master was read again from root's parameters, so the replicas took
  // the same steps from the same values: equal. Masters kept where the bf16
  // values agreed would round differently somewhere along the way.
  EXPECT_EQ(dmuon_check_replicas(r.opt), DMUON_SUCCESS) << dmuon_context_last_error(r.ctx);
}

TEST(MasterWeights, StateBytesCountTheMasters) {
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    Model with(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 1), without(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 0);
    int64_t a = 0, b = 0;
    ASSERT_EQ(dmuon_state_bytes(with.opt, &a), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_state_bytes(without.opt, &b), DMUON_SUCCESS);
    // Adam: one more fp32 per element beside the two moments; Muon: one more beside the momentum.
    EXPECT_EQ(a - b, kind == DMUON_KIND_ADAM ? b / 2 : b) << "kind " << kind;
  }
}

TEST(MasterWeights, OnlyZeroOrOneAndAnOlderLayoutGetsTheDefault) {
  dmuon_context_t ctx = nullptr;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.master_weights = 42;
  dmuon_optimizer_t opt = nullptr;
  EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(dmuon_context_last_error(ctx)).find("master_weights must be 0 or 1"), std::string::npos);
  // A caller compiled against layout version 2 never set the field: whatever
  // lies there is not read.
  o.version = 2;
  ASSERT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  dmuon_options_t got;
  ASSERT_EQ(dmuon_get_options(opt, &got), DMUON_SUCCESS);
  EXPECT_EQ(got.master_weights, 0);
  EXPECT_EQ(got.version, 3u);
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
}

}  // namespace
