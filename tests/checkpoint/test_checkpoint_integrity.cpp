// Damaged checkpoints and failing saves: a flipped byte inside a chunk, a
// value rewritten through HDF5 (fletcher32 still valid, dmuon's CRC not), an
// altered attribute (these three re-sealed, to reach the checks behind the
// whole-file seal), files truncated at several offsets, injected ENOSPC on
// write and on fsync. Each gives a status; the optimizer and the previous
// checkpoint stay as they were. Also: keep_last, no overwrite, attributes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ckpt_files.hpp"
#include "ckpt_model.hpp"
#include "h5_inspect.hpp"

using namespace ckpt_test;
namespace fs = std::filesystem;

namespace {

std::string fresh(const std::string& name) { return fresh_dir("integrity_" + name); }

int save(ModelRun& r, const std::string& dir, int64_t step, int keep_last = 0) {
  dmuon_checkpoint_options_t o = DMUON_CHECKPOINT_OPTIONS_INIT;
  o.keep_last = keep_last;
  return dmuon_checkpoint_save(r.opt, dir.c_str(), step, &o);
}

std::string latest(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string s;
  std::getline(in, s);
  return s;
}

// Restoring `path` into a fresh run fails with `status`, the message contains
// `needle`, and the run's state is exactly what it was.
void expect_refused(const std::string& path, int status, const std::string& needle) {
  ModelRun b(mixed_model(), 2);
  const State before = b.state();
  int64_t step = -7;
  EXPECT_EQ(dmuon_checkpoint_restore(b.opt, path.c_str(), &step), status) << dmuon_context_last_error(b.ctx);
  EXPECT_NE(std::string(dmuon_context_last_error(b.ctx)).find(needle), std::string::npos)
      << "message: " << dmuon_context_last_error(b.ctx) << " (wanted '" << needle << "')";
  EXPECT_EQ(step, -7);
  EXPECT_EQ(first_difference(before, b.state()), "");
  if (std::getenv("DMUON_TEST_VERBOSE") && b.rank == 0) std::printf("refused: %s\n", dmuon_context_last_error(b.ctx));
}

TEST(CheckpointIntegrity, FlippedByteInChunkIsRefusedAndDirectoryFallsBack) {
  const std::string dir = fresh("flip");
  ModelRun a(mixed_model());
  a.step(0);
  a.step(1);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  const State at1 = a.state();
  a.step(2);
  ASSERT_EQ(save(a, dir, 3), DMUON_SUCCESS);
  on_rank0([&] {
    const int64_t addr = first_chunk_address(ckpt(dir, 3), "/adam/fp32/param");
    ASSERT_GT(addr, 0);
    ASSERT_TRUE(flip_byte(ckpt(dir, 3), addr + 5));
    // Re-sealed, so the damage gets past the whole-file seal to fletcher32
    // (test_checkpoint_seal covers the seal itself).
    ASSERT_TRUE(reseal(ckpt(dir, 3)));
  });
  expect_refused(ckpt(dir, 3), DMUON_ERR_CHECKPOINT_CORRUPT, "/adam/fp32/param");

  ModelRun b(mixed_model(), 2);
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), &step), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(first_difference(at1, b.state()), "");
  EXPECT_EQ(b.attribute("dmuon.file"), ckpt(dir, 1));
  EXPECT_NE(b.attribute("dmuon.fallback").find("ckpt_3.h5"), std::string::npos) << b.attribute("dmuon.fallback");
}

TEST(CheckpointIntegrity, ValueRewrittenThroughHdf5IsCaughtByTheCrc) {
  const std::string dir = fresh("rewrite");
  ModelRun a(mixed_model());
  a.step(0);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS);
  // fletcher32 is recomputed by HDF5 here: only dmuon's own checksum can tell.
  on_rank0([&] {
    ASSERT_TRUE(rewrite_float(ckpt(dir, 1), "/muon/fp32/momentum", 3, 1.5f));
    ASSERT_TRUE(reseal(ckpt(dir, 1)));  // past the seal, as a file altered and re-sealed on purpose
  });
  expect_refused(ckpt(dir, 1), DMUON_ERR_CHECKPOINT_CORRUPT, "checksum of /muon/fp32/momentum");
}

TEST(CheckpointIntegrity, AlteredAttributeIsCaughtByTheMetadataCrc) {
  const std::string dir = fresh("attr");
  ModelRun a(mixed_model());
  a.step(0);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS);
  on_rank0([&] {
    ASSERT_TRUE(rewrite_root_attr_i64(ckpt(dir, 1), "optimizer_step", 999));
    ASSERT_TRUE(reseal(ckpt(dir, 1)));
  });
  expect_refused(ckpt(dir, 1), DMUON_ERR_CHECKPOINT_CORRUPT, "metadata checksum");
}

TEST(CheckpointIntegrity, TruncatedFilesAreRefused) {
  const std::string dir = fresh("truncate");
  ModelRun a(mixed_model());
  a.step(0);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS);
  const int64_t size = file_size(ckpt(dir, 1));
  ASSERT_GT(size, 4096);
  for (int64_t at : {int64_t{0}, int64_t{100}, size / 3, size / 2, size - 1}) {
    const std::string cut = dir + "/cut_" + std::to_string(at) + ".h5";
    on_rank0([&] {
      ASSERT_TRUE(copy_file(ckpt(dir, 1), cut));
      ASSERT_EQ(::truncate(cut.c_str(), at), 0);
    });
    SCOPED_TRACE("truncated at " + std::to_string(at) + " of " + std::to_string(size));
    expect_refused(cut, DMUON_ERR_CHECKPOINT_CORRUPT, "");
  }
  ModelRun b(mixed_model(), 2);  // the original is intact
  EXPECT_EQ(dmuon_checkpoint_restore(b.opt, ckpt(dir, 1).c_str(), nullptr), DMUON_SUCCESS);
  EXPECT_EQ(first_difference(a.state(), b.state()), "");
}

void expect_failed_save_leaves_previous(const char* fault, const char* needle) {
  const std::string dir = fresh(fault);
  ModelRun a(mixed_model());
  a.step(0);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS);
  const State at1 = a.state();
  const auto crcs = dataset_crcs(ckpt(dir, 1));
  a.step(1);
  const State at2 = a.state();
  ASSERT_EQ(setenv("DMUON_FAULT_POINT", fault, 1), 0);
  EXPECT_EQ(save(a, dir, 2), DMUON_ERR_IO);
  unsetenv("DMUON_FAULT_POINT");
  EXPECT_NE(std::string(dmuon_context_last_error(a.ctx)).find(needle), std::string::npos) << dmuon_context_last_error(a.ctx);
  EXPECT_EQ(first_difference(at2, a.state()), "");  // saving never changes the optimizer
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(ckpt(dir, 2)));
  EXPECT_FALSE(fs::exists(ckpt(dir, 2) + ".tmp"));
  EXPECT_EQ(latest(dir), "ckpt_1.h5");
  EXPECT_EQ(dataset_crcs(ckpt(dir, 1)), crcs);
  ModelRun b(mixed_model(), 2);
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), &step), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(first_difference(at1, b.state()), "");
  // And the next save works.
  EXPECT_EQ(save(a, dir, 2), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  EXPECT_EQ(latest(dir), "ckpt_2.h5");
}

TEST(CheckpointIntegrity, EnospcOnWriteOfOneRankLeavesThePreviousCheckpoint) {
  expect_failed_save_leaves_previous("save-enospc@1", "No space left on device");
}

TEST(CheckpointIntegrity, EnospcOnFsyncLeavesThePreviousCheckpoint) {
  expect_failed_save_leaves_previous("save-enospc-fsync@0", "No space left on device");
}

TEST(CheckpointIntegrity, ACommittedCheckpointIsNeverOverwritten) {
  const std::string dir = fresh("overwrite");
  ModelRun a(mixed_model());
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS);
  const auto crcs = dataset_crcs(ckpt(dir, 1));
  a.step(0);
  EXPECT_EQ(save(a, dir, 1), DMUON_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(dmuon_context_last_error(a.ctx)).find("never overwritten"), std::string::npos);
  EXPECT_EQ(dataset_crcs(ckpt(dir, 1)), crcs);
}

TEST(CheckpointIntegrity, KeepLastPrunesOlderCheckpoints) {
  const std::string dir = fresh("keep");
  ModelRun a(mixed_model());
  for (int s = 1; s <= 4; ++s) {
    a.step(s);
    ASSERT_EQ(save(a, dir, s * 10, 2), DMUON_SUCCESS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(ckpt(dir, 10)));
  EXPECT_FALSE(fs::exists(ckpt(dir, 20)));
  EXPECT_TRUE(fs::exists(ckpt(dir, 30)));
  EXPECT_TRUE(fs::exists(ckpt(dir, 40)));
  EXPECT_EQ(latest(dir), "ckpt_40.h5");
}

TEST(CheckpointIntegrity, UserAttributesAndHyperParametersTravel) {
  const std::string dir = fresh("attributes");
  ModelRun a(mixed_model());
  char buf[64];
  EXPECT_EQ(dmuon_checkpoint_get_attribute(a.opt, "run", buf, sizeof buf), DMUON_ERR_NOT_FOUND);
  EXPECT_EQ(dmuon_checkpoint_set_attribute(a.opt, "run", "surrogate-7"), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_checkpoint_set_attribute(a.opt, "dmuon.plan", "x"), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_checkpoint_set_attribute(a.opt, "a/b", "x"), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_set_lr(a.opt, DMUON_KIND_ADAM, 0.0123), DMUON_SUCCESS);
  a.step(0);
  ASSERT_EQ(save(a, dir, 5), DMUON_SUCCESS);

  ModelRun b(mixed_model(), 2);
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), nullptr), DMUON_SUCCESS);
  EXPECT_EQ(b.attribute("run"), "surrogate-7");
  EXPECT_EQ(b.attribute("dmuon.user_step"), "5");
  EXPECT_EQ(dmuon_checkpoint_get_attribute(b.opt, "run", buf, 5), DMUON_ERR_INVALID_VALUE);  // too small
  EXPECT_EQ(dmuon_checkpoint_get_attribute(b.opt, "nope", buf, sizeof buf), DMUON_ERR_NOT_FOUND);
  dmuon_options_t o;
  ASSERT_EQ(dmuon_get_options(b.opt, &o), DMUON_SUCCESS);
  EXPECT_EQ(o.adam_lr, 0.0123);
}

TEST(CheckpointIntegrity, MissingPathsAndBadArguments) {
  const std::string dir = fresh("missing");
  ModelRun a(mixed_model());
  EXPECT_EQ(dmuon_checkpoint_restore(a.opt, dir.c_str(), nullptr), DMUON_ERR_NOT_FOUND);
  EXPECT_EQ(dmuon_checkpoint_restore(a.opt, (dir + "/nothing.h5").c_str(), nullptr), DMUON_ERR_NOT_FOUND);
  EXPECT_EQ(dmuon_checkpoint_restore(a.opt, nullptr, nullptr), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_checkpoint_save(nullptr, dir.c_str(), 1, nullptr), DMUON_ERR_NULL_HANDLE);
  dmuon_checkpoint_options_t bad = DMUON_CHECKPOINT_OPTIONS_INIT;
  bad.magic = 0;
  EXPECT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 1, &bad), DMUON_ERR_OPTIONS_VERSION);
  // Ranks that disagree on the step are refused on every rank, nothing written.
  EXPECT_EQ(save(a, dir, world_rank() == 0 ? 1 : 2), a.world > 1 ? DMUON_ERR_INVALID_VALUE : DMUON_SUCCESS);
}

}  // namespace
