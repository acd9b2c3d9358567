// The step only enqueues: with the optimizer's stream held busy by a kernel
// that waits for the host, dmuon_step() returns (eager, per-shape graphs and
// whole-step graph alike) while that kernel still runs; once released, the
// results equal an undisturbed twin's bit for bit. A host synchronisation or
// a waited-on device-to-host copy inside the step would block until the
// kernel gives up (seconds) and fail the timing and the stream check.
#include <chrono>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kModel = {
    {"w1", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {128, 384}},
    {"w2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {384, 128}},
    {"b1", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {384}},
    {"e", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {77, 128}},
};

// Spins until the host sets *flag, or gives up after `max_cycles`.
__global__ void hold_stream(volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}

void run(int step_graph, int clip) {
  cudaStream_t user = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.cuda_step_graph = step_graph;
  o.max_grad_norm = clip ? 1.0 : 0.0;
  dmuon_options_t ou = o;
  ou.cuda_stream = user;
  {  // the user's stream must outlive the optimizer that enqueues on it
  Model held("cuda", kModel, ou), twin("cuda", kModel, o);
  held.init();
  twin.init();
  for (int step = 0; step < 2; ++step) {  // warm-up: workspaces, first captures
    held.grads(step);
    twin.grads(step);
    ASSERT_EQ(dmuon_step(held.opt), DMUON_SUCCESS) << dmuon_context_last_error(held.ctx);
    ASSERT_EQ(dmuon_step(twin.opt), DMUON_SUCCESS);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  held.grads(2);  // synchronous copies: before the stream is held
  twin.grads(2);
  int* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *flag = 0;
  int* dflag = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0), cudaSuccess);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long long give_up = 10LL * clock_khz * 1000;  // about ten seconds
  hold_stream<<<1, 1, 0, user>>>(dflag, give_up);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 3; ++k) ASSERT_EQ(dmuon_step(held.opt), DMUON_SUCCESS) << dmuon_context_last_error(held.ctx);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t busy = cudaStreamQuery(user);
  *reinterpret_cast<volatile int*>(flag) = 1;
  ASSERT_EQ(cudaStreamSynchronize(user), cudaSuccess);
  EXPECT_EQ(busy, cudaErrorNotReady) << "the stream finished before the host released it: the step waited";
  EXPECT_LT(seconds, 2.0) << "three steps took " << seconds << " s behind a held stream";
  // Same three steps (same gradients, already in place) on the twin.
  for (int k = 0; k < 3; ++k) ASSERT_EQ(dmuon_step(twin.opt), DMUON_SUCCESS);
  for (std::size_t k = 0; k < kModel.size(); ++k) EXPECT_EQ(held.raw(int(k)), twin.raw(int(k))) << kModel[k].name;
  cudaFreeHost(flag);
  }
  cudaStreamDestroy(user);
}

TEST(CudaAsync, EagerStepNeverWaits) { run(0, 1); }
TEST(CudaAsync, WholeStepGraphNeverWaits) { run(1, 1); }

}  // namespace
