// The step only enqueues: with the optimizer's stream held busy by a kernel
// that waits for the host, dmuon_step() returns (eager, per-shape graphs and
// whole-step graph alike) while that kernel still runs; once released, the
// results equal an undisturbed twin's bit for bit. A host synchronisation or
// a waited-on device-to-host copy inside the step would block until the
// kernel gives up (seconds) and fail the timing and the stream check.
#include "gpu/gpu_model.hpp"
#include "gpu/hold_stream.cuh"

namespace {

using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kModel = {
    {"w1", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {128, 384}},
    {"w2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {384, 128}},
    {"b1", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {384}},
    {"e", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {77, 128}},
};

// held_default: the held stream is the legacy default stream and the step is
// given none, so it is ordered behind the held kernel by an event, which the
// host must not wait for either.
void run(int step_graph, int clip, bool held_default = false) {
  cudaStream_t user = nullptr;
  if (!held_default) ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
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
  ASSERT_NO_FATAL_FAILURE(gputest::expect_three_steps_never_wait(held, held_default ? cudaStreamLegacy : user));
  // Same three steps (same gradients, already in place) on the twin.
  for (int k = 0; k < 3; ++k) ASSERT_EQ(dmuon_step(twin.opt), DMUON_SUCCESS);
  for (std::size_t k = 0; k < kModel.size(); ++k) EXPECT_EQ(held.raw(int(k)), twin.raw(int(k))) << kModel[k].name;
  }
  if (user) cudaStreamDestroy(user);
}

TEST(CudaAsync, EagerStepNeverWaits) { run(0, 1); }
TEST(CudaAsync, WholeStepGraphNeverWaits) { run(1, 1); }
TEST(CudaAsync, DefaultStreamStepNeverWaits) { run(0, 1, true); }
TEST(CudaAsync, DefaultStreamWholeStepGraphNeverWaits) { run(1, 1, true); }

}  // namespace
