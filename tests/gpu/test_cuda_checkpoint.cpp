// Checkpoints of the "cuda" backend: what a save writes from device memory
// (through the backend's pinned staging) and a restore puts back are the
// state's exact bytes, across backends both ways, and training continued
// after a restore on the GPU matches training never interrupted, bitwise.
// The buffers are large enough to take several pieces of the staging
// (32 MiB each), with a partial last one, and small ones take the plain copy.
#include <stdlib.h>

#include <filesystem>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kModel = {
    {"big", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {4096, 4096}},  // 64 MiB: with the rest, three pieces
    {"tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {300, 40}},
    {"small_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {96, 48}},  // a buffer below the staging's threshold
    {"vec", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {9000001}},        // 36 MB: two pieces, the last partial
    {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {50}},
    {"bias_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {37}},
};

dmuon_options_t options() {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = 0.05;
  return o;
}

std::string temp_dir(const char* tag) {
  // One directory for all ranks (a save is collective): rank 0 makes it.
  std::string pattern = (std::filesystem::temp_directory_path() / (std::string("dmuon_cuda_ckpt_") + tag + "_XXXXXX")).string();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  MPI_Bcast(pattern.data(), static_cast<int>(pattern.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  return pattern;
}

std::vector<std::vector<char>> state_bytes(Model& m) {
  std::vector<std::vector<char>> all;
  for (std::size_t k = 0; k < kModel.size(); ++k) all.push_back(m.raw(int(k)));
  return all;
}

void steps(Model& m, int first, int count) {
  for (int s = first; s < first + count; ++s) {
    m.grads(s);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  }
}

void expect_same(const std::vector<std::vector<char>>& got, const std::vector<std::vector<char>>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << kModel[k].name << ": " << what;
}

TEST(CudaCheckpoint, RestoresExactBytesAcrossBackendsAndContinuesBitwise) {
  // No timed choice of the Newton-Schulz products: every context here must
  // make the same ones for the continued steps to match bitwise.
  const std::string dir = temp_dir("gpu"), dir_cpu = temp_dir("cpu");
  dmuon_options_t o = options();
  o.muon_ns_symmetric = DMUON_NS_SYMMETRIC_OFF;
  Model trained("cuda", kModel, o);
  trained.init();
  steps(trained, 0, 3);
  ASSERT_EQ(dmuon_checkpoint_save(trained.opt, dir.c_str(), 3, nullptr), DMUON_SUCCESS)
      << dmuon_context_last_error(trained.ctx);
  const auto saved = state_bytes(trained);
  steps(trained, 3, 2);
  const auto uninterrupted = state_bytes(trained);

  {  // GPU -> GPU: the parameters as saved, and then the same steps, bitwise.
    Model resumed("cuda", kModel, o);
    int64_t step = -1;
    ASSERT_EQ(dmuon_checkpoint_restore(resumed.opt, dir.c_str(), &step), DMUON_SUCCESS)
        << dmuon_context_last_error(resumed.ctx);
    EXPECT_EQ(step, 3);
    expect_same(state_bytes(resumed), saved, "restored on the GPU");
    steps(resumed, 3, 2);  // momentum and moments come back too, or this differs
    expect_same(state_bytes(resumed), uninterrupted, "two steps after the restore on the GPU");
  }
  {  // GPU -> CPU (the download path), then CPU -> GPU (the upload path).
    Model host("cpu", kModel, o);
    ASSERT_EQ(dmuon_checkpoint_restore(host.opt, dir.c_str(), nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(host.ctx);
    expect_same(state_bytes(host), saved, "restored on the CPU");
    ASSERT_EQ(dmuon_checkpoint_save(host.opt, dir_cpu.c_str(), 3, nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(host.ctx);
    Model back("cuda", kModel, o);
    ASSERT_EQ(dmuon_checkpoint_restore(back.opt, dir_cpu.c_str(), nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(back.ctx);
    expect_same(state_bytes(back), saved, "saved on the CPU, restored on the GPU");
    steps(back, 3, 2);
    expect_same(state_bytes(back), uninterrupted, "two steps after the CPU checkpoint's restore on the GPU");
  }
  // The folders are shared: every rank must be done with them before rank 0 alone removes them.
  MPI_Barrier(MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(dir_cpu);
  }
}

}  // namespace
