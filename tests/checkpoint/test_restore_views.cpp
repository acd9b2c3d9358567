// Views across a restore: onto the same plan every view taken before it
// stays valid (same address, restored contents; under ASan a freed view
// would be reported); a restore that must re-plan moves the storage and says
// so through dmuon_views_epoch; a `latest` that names a missing file is
// recorded in dmuon.fallback.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "ckpt_files.hpp"
#include "ckpt_model.hpp"

using namespace ckpt_test;

namespace {

// The mixed model plus blocks of 1 MiB and more, whose storage is mapped
// memory on the CPU backend (the restore moves pages into it) beside the
// small ones (copied).
std::vector<Spec> model_with_large_blocks() {
  auto m = mixed_model();
  m.push_back({"big_adam", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {300000}});
  m.push_back({"big_muon", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 1024}});
  return m;
}

struct Views {
  std::vector<void*> data, grad;
};

Views views_of(ModelRun& run, std::size_t n) {
  Views v;
  for (std::size_t k = 0; k < n; ++k) {
    v.data.push_back(run.data(k));
    v.grad.push_back(run.grad(k));
  }
  return v;
}

int64_t epoch_of(ModelRun& run) {
  int64_t e = -1;
  EXPECT_EQ(dmuon_views_epoch(run.opt, &e), DMUON_SUCCESS);
  return e;
}

// The bytes of part `label` of a state.
const std::vector<unsigned char>& part(const State& s, const std::string& label) {
  for (const auto& [name, bytes] : s)
    if (name == label) return bytes;
  throw std::runtime_error("no part " + label);
}

TEST(RestoreViews, SamePlanKeepsEveryViewAndItsContents) {
  const auto model = model_with_large_blocks();
  const std::string dir = fresh_dir("views_same_plan");
  ModelRun run(model);
  const Views before = views_of(run, model.size());  // taken once, after finalize
  EXPECT_EQ(epoch_of(run), 0);
  run.step(0);
  run.step(1);
  ASSERT_EQ(dmuon_checkpoint_save(run.opt, dir.c_str(), 2, nullptr), DMUON_SUCCESS);
  const State saved = run.state();
  run.step(2);
  run.step(3);
  ASSERT_NE(first_difference(saved, run.state()), "");
  ASSERT_EQ(dmuon_checkpoint_restore(run.opt, dir.c_str(), nullptr), DMUON_SUCCESS) << dmuon_context_last_error(run.ctx);
  EXPECT_EQ(epoch_of(run), 0);
  const Views after = views_of(run, model.size());
  EXPECT_EQ(after.data, before.data);
  EXPECT_EQ(after.grad, before.grad);
  EXPECT_EQ(first_difference(saved, run.state()), "");
  // The old views read the restored values and feed the next step.
  for (std::size_t k = 0; k < model.size(); ++k) {
    const std::size_t bytes = static_cast<std::size_t>(numel(model[k])) * elem_bytes(model[k].dtype);
    EXPECT_EQ(std::memcmp(before.data[k], part(saved, model[k].name + ".param").data(), bytes), 0) << model[k].name;
  }
  run.step(2);
  EXPECT_TRUE(run.ok);
  EXPECT_EQ(run.attribute("dmuon.fallback"), "");
}

TEST(RestoreViews, ReplanMovesTheStorageAndSaysSo) {
  const auto model = model_with_large_blocks();
  const std::string dir = fresh_dir("views_replan");
  ModelRun a(model);
  // Another plan on the same number of ranks: every Muon owner moved one
  // rank on (on one rank there is no other plan).
  std::vector<int> owners;
  for (std::size_t k = 0; k < model.size(); ++k)
    if (model[k].kind == DMUON_KIND_MUON) {
      int o = -1;
      dmuon_param_owner(a.opt, static_cast<int>(k), &o);
      owners.push_back((o + 1) % a.world);
    }
  a.impl().replan(owners);
  EXPECT_EQ(epoch_of(a), 1);  // new storage, whatever the owners
  const int64_t moved = a.world > 1 ? 1 : 0;  // a restore re-plans only onto another plan
  a.step(0);
  ASSERT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS);

  ModelRun b(model, 2);
  const Views before = views_of(b, model.size());
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), nullptr), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(epoch_of(b), moved);
  EXPECT_EQ(b.attribute("dmuon.plan"), "replayed");
  EXPECT_EQ(first_difference(a.state(), b.state()), "");
  if (moved) EXPECT_NE(views_of(b, model.size()).data, before.data);
  a.step(1);
  b.step(1);
  EXPECT_EQ(first_difference(a.state(), b.state()), "");
}

TEST(RestoreViews, LatestNamingAMissingFileIsRecordedAsFallback) {
  const auto model = mixed_model();
  const std::string dir = fresh_dir("views_latest_missing");
  ModelRun a(model);
  a.step(0);
  ASSERT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS);
  on_rank0([&] { std::ofstream(dir + "/latest") << "ckpt_99.h5\n"; });
  ModelRun b(model, 2);
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), &step), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 1);
  const std::string fallback = b.attribute("dmuon.fallback");
  EXPECT_NE(fallback.find("ckpt_99.h5"), std::string::npos) << fallback;
  EXPECT_NE(fallback.find("does not exist"), std::string::npos) << fallback;
}

}  // namespace
