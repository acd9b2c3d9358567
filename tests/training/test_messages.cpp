// The message callback: a restore that falls back to an older checkpoint
// warns, a re-plan of the storage informs, and without a callback nothing is
// heard.
#include <filesystem>
#include <string>
#include <vector>

#include "core/optimizer.hpp"
#include "training/training_model.hpp"

namespace {

using training::Model;

struct Heard {
  std::vector<std::pair<int, std::string>> messages;
  static void record(int level, const char* text, void* user) {
    static_cast<Heard*>(user)->messages.emplace_back(level, text);
  }
  bool has(int level, const std::string& part) const {
    for (const auto& [l, t] : messages)
      if (l == level && t.find(part) != std::string::npos) return true;
    return false;
  }
};

TEST(Messages, FallbackWarns) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path = training::shared_temp_dir("dmuon_messages_");
  ASSERT_FALSE(path.empty());
  const char* dir = path.c_str();
  {
    Model m(DMUON_OPTIONS_INIT);
    dmuon_checkpoint_options_t co = DMUON_CHECKPOINT_OPTIONS_INIT;
    co.keep_last = 0;
    ASSERT_EQ(dmuon_checkpoint_save(m.opt, dir, 1, &co), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_checkpoint_save(m.opt, dir, 2, &co), DMUON_SUCCESS);
  }
  if (rank == 0) {  // the newest checkpoint loses its second half
    const std::string newest = std::string(dir) + "/ckpt_2.h5";
    ASSERT_EQ(truncate(newest.c_str(), static_cast<off_t>(std::filesystem::file_size(newest) / 2)), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Model m(DMUON_OPTIONS_INIT);
    Heard heard;
    ASSERT_EQ(dmuon_context_set_message_callback(m.ctx, Heard::record, &heard), DMUON_SUCCESS);
    int64_t step = 0;
    ASSERT_EQ(dmuon_checkpoint_restore(m.opt, dir, &step), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_EQ(step, 1);
    EXPECT_TRUE(heard.has(DMUON_MESSAGE_WARNING, "ckpt_1.h5")) << "no warning about the fallback";
    heard.messages.clear();
    ASSERT_EQ(dmuon_context_set_message_callback(m.ctx, nullptr, nullptr), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_checkpoint_restore(m.opt, dir, &step), DMUON_SUCCESS);
    EXPECT_TRUE(heard.messages.empty()) << "heard a message without a callback";
  }
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(dmuon_context_set_message_callback(nullptr, Heard::record, nullptr), DMUON_ERR_NULL_HANDLE);
}

// A restore re-plans when the saved ownership differs from this run's: here
// the re-plan itself is called, with every Muon matrix moved to the next rank.
TEST(Messages, ReplanInforms) {
  Model m(DMUON_OPTIONS_INIT);
  ASSERT_GE(m.world, 2) << "registered at two ranks: a re-plan needs them";
  Heard heard;
  ASSERT_EQ(dmuon_context_set_message_callback(m.ctx, Heard::record, &heard), DMUON_SUCCESS);
  std::vector<int> owners;
  for (std::size_t k = 0; k < training::model().size(); ++k) {
    int owner = -1;
    ASSERT_EQ(dmuon_param_owner(m.opt, static_cast<int>(k), &owner), DMUON_SUCCESS);
    if (owner >= 0) owners.push_back((owner + 1) % m.world);
  }
  m.opt->impl.replan(owners);
  EXPECT_TRUE(heard.has(DMUON_MESSAGE_INFO, "ownership plan changed"));
}

}  // namespace
