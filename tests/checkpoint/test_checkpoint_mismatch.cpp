// A checkpoint of another model is refused, naming the parameter, and the
// optimizer is left exactly as it was: one shape, dtype or kind changed, one
// parameter missing or extra. A model registered in another order restores
// (parameters are matched by name).
#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt_model.hpp"

using namespace ckpt_test;

namespace {

const std::string& saved_dir() {
  static const std::string dir = [] {
    const std::string d = "checkpoint_data/mismatch";
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      std::filesystem::remove_all(d);
      std::filesystem::create_directories(d);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ModelRun a(mixed_model());
    a.step(0);
    a.step(1);
    EXPECT_EQ(dmuon_checkpoint_save(a.opt, d.c_str(), 2, nullptr), DMUON_SUCCESS);
    return d;
  }();
  return dir;
}

void expect_mismatch(std::vector<Spec> model, const std::string& name) {
  ModelRun b(model, 2);
  const State before = b.state();
  EXPECT_EQ(dmuon_checkpoint_restore(b.opt, saved_dir().c_str(), nullptr), DMUON_ERR_CHECKPOINT_MISMATCH)
      << dmuon_context_last_error(b.ctx);
  const std::string msg = dmuon_context_last_error(b.ctx);
  EXPECT_NE(msg.find("'" + name + "'"), std::string::npos) << msg;
  if (std::getenv("DMUON_TEST_VERBOSE") && b.rank == 0) std::printf("refused: %s\n", msg.c_str());
  EXPECT_EQ(first_difference(before, b.state()), "");
}

Spec& find(std::vector<Spec>& m, const std::string& name) {
  for (Spec& s : m)
    if (s.name == name) return s;
  throw std::runtime_error("no " + name);
}

TEST(CheckpointMismatch, ShapeChanged) {
  auto m = mixed_model();
  find(m, "w_mid").shape = {8, 16};
  expect_mismatch(m, "w_mid");
}

TEST(CheckpointMismatch, DtypeChanged) {
  auto m = mixed_model();
  find(m, "b_in").dtype = DMUON_DTYPE_BF16;
  expect_mismatch(m, "b_in");
}

TEST(CheckpointMismatch, KindChanged) {
  auto m = mixed_model();
  find(m, "w_sq").kind = DMUON_KIND_ADAM;
  expect_mismatch(m, "w_sq");
}

TEST(CheckpointMismatch, ParameterMissing) {
  auto m = mixed_model();
  m.erase(m.begin() + 6);  // "gain": in the file, not registered
  expect_mismatch(m, "gain");
}

TEST(CheckpointMismatch, ParameterExtra) {
  auto m = mixed_model();
  m.push_back({"extra_bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {4}});
  expect_mismatch(m, "extra_bias");
}

TEST(CheckpointMismatch, OtherRegistrationOrderRestoresByName) {
  auto m = mixed_model();
  std::reverse(m.begin(), m.end());
  ModelRun b(m, 2);
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, saved_dir().c_str(), nullptr), DMUON_SUCCESS)
      << dmuon_context_last_error(b.ctx);
  ModelRun a(mixed_model());
  a.step(0);
  a.step(1);
  // Compare parameter values by name (the layouts differ).
  for (std::size_t k = 0; k < m.size(); ++k) {
    const std::size_t j = m.size() - 1 - k;
    const std::size_t bytes = static_cast<std::size_t>(numel(m[k])) * elem_bytes(m[k].dtype);
    EXPECT_EQ(std::memcmp(b.data(k), a.data(j), bytes), 0) << m[k].name;
  }
}

}  // namespace
