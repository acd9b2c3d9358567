// collective_timeout_ms on the CUDA backend, on one GPU. The test-only fault
// point DMUON_FAULT_POINT=cuda-stall makes the next step's stream wait on a
// kernel that spins until the backend aborts, standing in for a collective
// whose peer never arrives. The step still returns at once (it only
// enqueues); the first host wait after it returns DMUON_ERR_TIMEOUT no earlier
// than the timeout and well before the kernel's own 60 s limit; every later
// call that would wait or communicate fails at once with the same status;
// destroy returns at once; and the abort released the kernel, so the device
// drains (a cudaDeviceSynchronize that would otherwise take 60 s).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Model;
using gputest::Spec;
using Clock = std::chrono::steady_clock;

const std::vector<Spec> kModel = {
    {"w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 48}},
    {"e", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {32, 96}},
    {"b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {33}},
};
constexpr int kTimeoutMs = 200;
// Generous: a loaded test machine, the abort itself; still far below the
// stall kernel's 60 s, which is what a missing timeout would cost.
constexpr double kSlackMs = 3000;
// A call that fails at once: no wait for the device, no collective.
constexpr double kFastMs = 50;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Sets DMUON_FAULT_POINT for one scope (one step).
struct FaultPoint {
  explicit FaultPoint(const char* point) { setenv("DMUON_FAULT_POINT", point, 1); }
  ~FaultPoint() { unsetenv("DMUON_FAULT_POINT"); }
};

// Which call is the first to wait for the stalled device.
enum class FirstWait { clip_stats, optimizer_destroy, later_steps };

void run(int step_graph, FirstWait first) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.collective_timeout_ms = kTimeoutMs;
  o.cuda_step_graph = step_graph;
  o.max_grad_norm = 1.0;  // the step keeps its statistics on the device
  // The stall is this rank's own fault, and the watchdog this rank's own
  // wait: each rank checks it on a context of its own (MPI_COMM_SELF). A peer
  // that dies inside a collective is die_in_step_cuda's case.
  Model m("cuda", kModel, o, MPI_COMM_SELF);
  ASSERT_NE(m.opt, nullptr);
  m.init();
  for (int step = 0; step < 3; ++step) {  // warm-up: workspaces, capture and replays of the step graph
    m.grads(step);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  }
  // A healthy wait under the deadline succeeds.
  dmuon_clip_stats_t stats{};
  ASSERT_EQ(dmuon_get_clip_stats(m.opt, &stats), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  m.grads(3);  // synchronous copies: before the stream stalls

  {
    FaultPoint stall("cuda-stall");
    const Clock::time_point t0 = Clock::now();
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_LT(ms_since(t0), kTimeoutMs / 2.0) << "the step waited for the stalled stream";
  }

  int rc = DMUON_SUCCESS;
  double ms = 0;
  if (first == FirstWait::later_steps) {
    // Steps go on enqueueing until the scalar ring has no free slot: the slot
    // the stalled step used is retired only when its work ends.
    int steps = 0;
    while (rc == DMUON_SUCCESS && steps < 20) {
      const Clock::time_point t0 = Clock::now();
      rc = dmuon_step(m.opt);
      ms = ms_since(t0);
      ++steps;
      if (rc == DMUON_SUCCESS) EXPECT_LT(ms, kTimeoutMs / 2.0) << "step " << steps << " after the stall waited";
    }
    EXPECT_LE(steps, 9) << "the ring of 8 slots should have run out";
  } else {
    const Clock::time_point t0 = Clock::now();
    rc = first == FirstWait::clip_stats ? dmuon_get_clip_stats(m.opt, &stats) : dmuon_optimizer_destroy(&m.opt);
    ms = ms_since(t0);
  }
  const std::string message = first == FirstWait::optimizer_destroy ? "" : dmuon_context_last_error(m.ctx);
  EXPECT_EQ(rc, DMUON_ERR_TIMEOUT) << dmuon_error_string(rc) << ": " << message;
  EXPECT_GE(ms, 0.95 * kTimeoutMs) << "returned before the deadline";
  EXPECT_LE(ms, kTimeoutMs + kSlackMs) << "returned long after the deadline";
  if (first == FirstWait::optimizer_destroy) {
    EXPECT_EQ(m.opt, nullptr) << "a destroy that failed must still release the handle";
    EXPECT_NE(std::string(dmuon_context_last_error(m.ctx)).find("collective_timeout_ms"), std::string::npos)
        << dmuon_context_last_error(m.ctx);
  } else {
    EXPECT_NE(message.find("collective_timeout_ms"), std::string::npos) << message;
    EXPECT_NE(message.find("NCCL communicator was aborted"), std::string::npos) << message;

    // Poisoned: everything that would wait or communicate fails at once.
    int64_t count = 0;
    int requested = 0;
    const std::string dir = (std::filesystem::temp_directory_path() / "dmuon_cuda_timeout_unused").string();
    const struct {
      const char* name;
      std::function<int()> call;
    } calls[] = {
        {"dmuon_get_clip_stats", [&] { return dmuon_get_clip_stats(m.opt, &stats); }},
        {"dmuon_get_step_count", [&] { return dmuon_get_step_count(m.opt, &count); }},
        {"dmuon_step", [&] { return dmuon_step(m.opt); }},
        {"dmuon_checkpoint_requested", [&] { return dmuon_checkpoint_requested(m.ctx, &requested); }},
        {"dmuon_checkpoint_save", [&] { return dmuon_checkpoint_save(m.opt, dir.c_str(), 9, nullptr); }},
        {"dmuon_checkpoint_restore", [&] { return dmuon_checkpoint_restore(m.opt, dir.c_str(), nullptr); }},
    };
    for (const auto& c : calls) {
      const Clock::time_point t0 = Clock::now();
      const int again = c.call();
      const double waited = ms_since(t0);
      EXPECT_EQ(again, DMUON_ERR_TIMEOUT) << c.name << ": " << dmuon_context_last_error(m.ctx);
      EXPECT_LT(waited, kFastMs) << c.name << " waited";
      EXPECT_NE(std::string(dmuon_context_last_error(m.ctx)).find("not attempted"), std::string::npos)
          << c.name << ": " << dmuon_context_last_error(m.ctx);
    }
    EXPECT_FALSE(std::filesystem::exists(dir)) << "the refused save created " << dir;
    const Clock::time_point t0 = Clock::now();
    EXPECT_EQ(dmuon_optimizer_destroy(&m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_LT(ms_since(t0), kFastMs) << "optimizer destroy waited";
  }
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(dmuon_context_destroy(&m.ctx), DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
  EXPECT_EQ(m.ctx, nullptr);
  EXPECT_LT(ms_since(t0), kFastMs) << "context destroy waited";
  // The abort released the stalled kernel: the device drains at once.
  const Clock::time_point t1 = Clock::now();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(ms_since(t1), 1000.0) << "the stall kernel was not released by the abort";
}

TEST(CudaTimeout, FirstWaitIsClipStats) { run(0, FirstWait::clip_stats); }
TEST(CudaTimeout, FirstWaitIsClipStatsWholeStepGraph) { run(1, FirstWait::clip_stats); }
TEST(CudaTimeout, FirstWaitIsOptimizerDestroy) { run(0, FirstWait::optimizer_destroy); }
TEST(CudaTimeout, StepsRunOutOfRingSlots) { run(1, FirstWait::later_steps); }

// No deadline: a healthy run is unchanged, and a context destroyed with work
// still queued waits for it (the finalize of the non-blocking communicator).
TEST(CudaTimeout, NoDeadlineStillWaits) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  Model m("cuda", kModel, o);
  m.init();
  for (int step = 0; step < 3; ++step) {
    m.grads(step);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  }
  int64_t steps = 0;
  EXPECT_EQ(dmuon_get_step_count(m.opt, &steps), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(dmuon_optimizer_destroy(&m.opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_context_destroy(&m.ctx), DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
}

}  // namespace
