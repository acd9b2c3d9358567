// Master weights (options.master_weights) on the CPU backend: updates of
// 1e-4 relative size move a bf16 parameter as they move an fp32 one (the
// master takes the same IEEE operations as the fp32 parameter, so the bf16
// parameter is exactly its rounding), and without the option they vanish
// (each is below half a bf16 ulp). A value the program writes into the bf16
// view is read back by the next step; dmuon_broadcast_params re-reads every
// master; the option is part of the options struct's layout version 3.
// Checkpoints: the masters saved on N ranks and restored on M go on bit for
// bit as the uninterrupted run; a file without masters zeroes them (read from
// the parameters at the next step); an optimizer without the option restores
// a file with masters.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "core/optimizer.hpp"
#include "dmuon/dmuon.h"
#include "training/master_weights_model.hpp"

namespace {

using master_weights_test::expect_tracks_fp32;
using master_weights_test::kSteps;
using master_weights_test::Model;
using master_weights_test::resume_across;
using master_weights_test::Trio;

TEST(MasterWeights, AdamUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_ADAM);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 2, true);
}

TEST(MasterWeights, MuonUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_MUON);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 1, true);
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

// ------------------------------------------------------------ checkpoints

// This rank's masters (Adam: all; Muon: its segment), read from the storage.
std::vector<float> masters_of(const Model& m) {
  const dmuon::Optimizer& o = m.opt->impl;
  const float* at = m.kind == DMUON_KIND_ADAM ? o.adam_buffers(dmuon::Dtype::bf16).master
                                              : o.muon_buffers(dmuon::Dtype::bf16).master;
  const int64_t n = m.kind == DMUON_KIND_ADAM ? o.adam_buffers(dmuon::Dtype::bf16).elements
                                              : o.muon_buffers(dmuon::Dtype::bf16).segment_elements;
  return at ? std::vector<float>(at, at + n) : std::vector<float>{};
}

TEST(MasterWeightsCheckpoint, SavedOnNRanksRestoredOnMGoesOnBitForBit) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int half = world > 1 ? world / 2 : 1;
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    resume_across(world, half, kind);
    resume_across(half, world, kind);
  }
}

TEST(MasterWeightsCheckpoint, AFileWithoutMastersLetsTheNextStepReadTheParameters) {
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    const std::string dir = ckpt_test::fresh_dir("master_weights_none_" + std::to_string(kind));
    Model plain(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 0), master(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 1);
    plain.write_params(1.0f);
    for (int s = 0; s < 5; ++s) {
      plain.step(s);
      master.step(s);
    }
    ASSERT_EQ(dmuon_checkpoint_save(plain.opt, dir.c_str(), 5, nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(plain.ctx);
    bool held = false;  // masters of this rank that the restore must clear
    for (float x : masters_of(master)) held = held || x != 0.0f;
    ASSERT_EQ(dmuon_checkpoint_restore(master.opt, dir.c_str(), nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(master.ctx);
    for (float x : masters_of(master)) ASSERT_EQ(x, 0.0f) << "kind " << kind << (held ? "" : " (none held)");
    EXPECT_EQ(master.values(), plain.values());
    // The first step reads every master from its parameter: the step of the
    // optimizer without masters, whose state the file holds.
    plain.step(5);
    master.step(5);
    EXPECT_EQ(master.values(), plain.values()) << "kind " << kind;
  }
}

TEST(MasterWeightsCheckpoint, AnOptimizerWithoutTheOptionRestoresAFileWithMasters) {
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    const std::string dir = ckpt_test::fresh_dir("master_weights_ignored_" + std::to_string(kind));
    Model master(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 1), plain(MPI_COMM_WORLD, kind, DMUON_DTYPE_BF16, 0);
    for (int s = 0; s < kSteps / 2; ++s) master.step(s);
    ASSERT_EQ(dmuon_checkpoint_save(master.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(master.ctx);
    ASSERT_EQ(dmuon_checkpoint_restore(plain.opt, dir.c_str(), nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(plain.ctx);
    EXPECT_EQ(plain.values(), master.values()) << "kind " << kind;
    EXPECT_TRUE(masters_of(plain).empty());
  }
}

}  // namespace
