// Which GPU a "cuda" context runs on: "cuda:current" keeps the device the
// program selected, "cuda:N" takes device N, every call leaves the caller's
// current device as it was, an index out of range fails on every rank, and
// ranks that share a GPU are refused without the opt-in (DMUON_CUDA_SHARE_GPU)
// on every rank, none left waiting. At 1, 2 and 4 ranks on any number of GPUs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "gpu/gpu_model.hpp"

namespace {

int device_count() {
  int n = 0;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  return n;
}

// Whether this node has more ranks than GPUs (then ranks share one).
bool ranks_share_gpus() {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int mine = local > device_count() ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

const std::vector<gputest::Spec> kModel = {
    {"w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {32, 48}},
    {"b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {48}},
};

TEST(CudaDevice, CurrentDeviceIsKeptAndCallsLeaveItAlone) {
  const int last = device_count() - 1;
  ASSERT_EQ(cudaSetDevice(last), cudaSuccess);
  {
    gputest::Model m("cuda:current", kModel, dmuon_options_t DMUON_OPTIONS_INIT);
    int now = -1;
    ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
    EXPECT_EQ(now, last);
    void* d = nullptr;
    ASSERT_EQ(dmuon_param_view(m.opt, 0, &d, nullptr), DMUON_SUCCESS);
    cudaPointerAttributes a{};
    ASSERT_EQ(cudaPointerGetAttributes(&a, d), cudaSuccess);
    EXPECT_EQ(a.device, last);
    m.init();
    m.grads(0);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    ASSERT_EQ(dmuon_synchronize(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  }
  int now = -1;
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, last);
}

TEST(CudaDevice, ExplicitIndexIsUsedAndRestoredAroundCalls) {
  const std::string res = "cuda:" + std::to_string(device_count() - 1);
  gputest::Model m(res.c_str(), kModel, dmuon_options_t DMUON_OPTIONS_INIT);
  int now = -1;
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, device_count() - 1);  // "cuda:N" makes N current, as "cuda" does its choice
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the program moves on; dmuon's calls still run on N
  m.init();
  m.grads(0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, 0);
}

TEST(CudaDevice, IndexOutOfRangeFailsOnEveryRank) {
  dmuon_context_t ctx = nullptr;
  // Only the last rank asks for a device that does not exist; all must fail.
  const std::string res = gputest::rank_in(MPI_COMM_WORLD) == gputest::size_of(MPI_COMM_WORLD) - 1
                              ? "cuda:" + std::to_string(device_count())
                              : "cuda:current";
  const int rc = dmuon_context_create(MPI_COMM_WORLD, res.c_str(), &ctx);
  EXPECT_EQ(rc, DMUON_ERR_NO_DEVICE);
  EXPECT_EQ(ctx, nullptr);
  const std::string msg = dmuon_context_last_error(nullptr);
  EXPECT_TRUE(msg.find("there is no device") != std::string::npos || msg.find("another rank") != std::string::npos) << msg;
}

TEST(CudaDevice, SharedGpuNeedsTheOptIn) {
  const bool shared = ranks_share_gpus();
  const char* opt_in = std::getenv("DMUON_CUDA_SHARE_GPU");
  const std::string saved = opt_in ? opt_in : "";
  unsetenv("DMUON_CUDA_SHARE_GPU");
  dmuon_context_t ctx = nullptr;
  const int rc = dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx);
  if (shared) {
    EXPECT_EQ(rc, DMUON_ERR_NO_DEVICE);
    const std::string msg = dmuon_context_last_error(nullptr);
    EXPECT_TRUE(msg.find("DMUON_CUDA_SHARE_GPU") != std::string::npos || msg.find("another rank") != std::string::npos)
        << msg;
  } else {
    EXPECT_EQ(rc, DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
  }
  dmuon_context_destroy(&ctx);
  if (!saved.empty()) setenv("DMUON_CUDA_SHARE_GPU", saved.c_str(), 1);
}

}  // namespace
