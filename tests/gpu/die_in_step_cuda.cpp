// A rank dies during a step on the CUDA backend (NCCL); the survivor must get
// DMUON_ERR_PEER_FAILED or DMUON_ERR_TIMEOUT, not a hang.
//
//   die_in_step_cuda <verdict_dir> <victim_rank> <timeout_ms>
//
// Needs one GPU per rank (NCCL refuses two ranks on one device): with fewer
// visible on the node every rank writes a SKIP verdict, prints "gpu test
// skipped" and exits 77.
//
// Every rank takes a good step (NCCL collectives through the non-blocking
// communicator, checked by comparing the gathered Muon matrices across
// ranks). Then the victim stalls its own stream (DMUON_FAULT_POINT=cuda-stall
// on that rank only), enqueues its second step behind the stall, so that none
// of its NCCL kernels ever starts, and SIGKILLs itself: from the survivors'
// side a peer that died inside the step. Each survivor's step still returns
// (it only enqueues); its first wait for the device (dmuon_get_clip_stats)
// must return DMUON_ERR_PEER_FAILED (NCCL noticed) or DMUON_ERR_TIMEOUT (no
// earlier than the timeout) within the timeout plus slack; then every call
// that would wait or communicate fails at once with that status, and destroy
// returns at once. Verdicts go to <verdict_dir>/rank<r>.txt and are judged by
// tests/hardening/check_verdicts.cmake, as for the CPU rank-death tests.
#include <cuda_runtime.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"
#include "hardening/verdict.hpp"

namespace {

using verdict::expect;
using verdict::finish;
using verdict::ms_since;
using Clock = std::chrono::steady_clock;

// Gradients written straight into the flat device buffers.
void fill_gradients(dmuon_optimizer_t opt, int nparams, int rank, int step) {
  for (int id = 0; id < nparams; ++id) {
    void* g = nullptr;
    int64_t n = 0;
    dmuon_param_view(opt, id, nullptr, &g);
    dmuon_param_numel(opt, id, &n);
    std::vector<float> host(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      host[static_cast<std::size_t>(i)] = verdict::grad_value(id, rank, step, i);
    expect(cudaMemcpy(g, host.data(), host.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess, "gradient upload");
  }
  expect(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize after the gradient upload");
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, size = 1;
  verdict::start(argc, argv, 3, "<verdict_dir> <victim_rank> <timeout_ms>", rank, size);
  verdict::open(argv[1], rank);
  const int victim = std::atoi(argv[2]);
  const int timeout_ms = std::atoi(argv[3]);

  // One GPU per rank of this node, on every node, or ranks that share a GPU
  // on purpose (gpu_rank.sh), or nobody runs.
  MPI_Comm node = MPI_COMM_NULL;
  int local_size = 1, devices = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const char* share = std::getenv("DMUON_CUDA_SHARE_GPU");
  int mine = devices >= local_size || (devices > 0 && share && std::string(share) == "1") ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all || size < 2) {
    verdict::write("SKIP needs one GPU per rank (or DMUON_CUDA_SHARE_GPU=1) and 2 ranks or more; rank " + std::to_string(rank) + " sees " +
                  std::to_string(devices) + " GPUs for " + std::to_string(local_size) + " ranks on its node");
    if (rank == 0) std::printf("fewer GPUs than ranks: gpu test skipped\n");
    MPI_Finalize();
    return 77;
  }
  MPI_Barrier(MPI_COMM_WORLD);

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.collective_timeout_ms = timeout_ms;
  o.max_grad_norm = 1.0;  // so that the step has the norm all-reduce too
  expect(dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx) == DMUON_SUCCESS,
         std::string("context_create: ") + dmuon_context_last_error(nullptr));
  if (!verdict::state().failures.empty()) finish(rank);
  expect(dmuon_optimizer_create(ctx, &o, &opt) == DMUON_SUCCESS, "optimizer_create");
  const int64_t mat[2] = {64, 32};
  const int nparams = verdict::register_model(opt, size, mat);
  expect(dmuon_optimizer_finalize(opt) == DMUON_SUCCESS, std::string("finalize: ") + dmuon_context_last_error(ctx));
  if (!verdict::state().failures.empty()) finish(rank);

  // A good step: the NCCL collectives work through the non-blocking communicator.
  fill_gradients(opt, nparams, rank, 0);
  expect(dmuon_step(opt) == DMUON_SUCCESS, std::string("first step: ") + dmuon_context_last_error(ctx));
  dmuon_clip_stats_t stats{};
  expect(dmuon_get_clip_stats(opt, &stats) == DMUON_SUCCESS,
         std::string("clip stats after the first step: ") + dmuon_context_last_error(ctx));
  for (int m = 0; m < size; ++m) {  // every rank holds every matrix as its owner published it
    void* w = nullptr;
    dmuon_param_view(opt, m, &w, nullptr);
    std::vector<float> here(64 * 32), root(64 * 32);
    expect(cudaMemcpy(here.data(), w, here.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    root = here;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    expect(std::memcmp(here.data(), root.data(), here.size() * 4) == 0,
           "matrix w" + std::to_string(m) + " differs from rank 0's after the first step");
  }
  if (!verdict::state().failures.empty()) finish(rank);
  fill_gradients(opt, nparams, rank, 1);
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == victim) {
    const std::string point = "cuda-stall@" + std::to_string(rank);
    setenv("DMUON_FAULT_POINT", point.c_str(), 1);
    dmuon_step(opt);  // enqueued behind the stall: none of its collectives starts
    std::raise(SIGKILL);
    expect(false, "the victim did not die");
    finish(rank);
  }

  const Clock::time_point t0 = Clock::now();
  int rc = dmuon_step(opt);
  const double step_ms = ms_since(t0);
  double wait_ms = 0;
  if (rc == DMUON_SUCCESS) {  // the usual case: the step only enqueued; the wait finds the failure
    const Clock::time_point t1 = Clock::now();
    rc = dmuon_get_clip_stats(opt, &stats);
    wait_ms = ms_since(t1);
  }
  const double total_ms = ms_since(t0);
  const std::string message = dmuon_context_last_error(ctx);
  std::printf("rank %d: step %.0f ms, first failure %d (%s) after %.0f ms: %s\n", rank, step_ms, rc,
              dmuon_error_string(rc), total_ms, message.c_str());
  expect(rc == DMUON_ERR_TIMEOUT || rc == DMUON_ERR_PEER_FAILED,
         "the failed step gave " + std::to_string(rc) + " (" + dmuon_error_string(rc) +
             "), not DMUON_ERR_TIMEOUT or DMUON_ERR_PEER_FAILED: " + message);
  if (rc == DMUON_ERR_TIMEOUT && wait_ms > 0)
    expect(wait_ms >= 0.95 * timeout_ms, "timed out after " + std::to_string(wait_ms) + " ms, before the timeout");
  expect(total_ms <= timeout_ms + 5000.0, "failed after " + std::to_string(total_ms) + " ms, long after the timeout");

  // Poisoned: every call that would wait or communicate fails at once.
  const std::string unused = std::string(argv[1]) + "/not_written_rank" + std::to_string(rank);
  int requested = -1;
  int64_t steps = 0;
  verdict::expect_fast_failures(
      {
          {"dmuon_get_clip_stats", [&] { return dmuon_get_clip_stats(opt, &stats); }},
          {"dmuon_get_step_count", [&] { return dmuon_get_step_count(opt, &steps); }},
          {"dmuon_step", [&] { return dmuon_step(opt); }},
          {"dmuon_checkpoint_requested", [&] { return dmuon_checkpoint_requested(ctx, &requested); }},
          {"dmuon_checkpoint_save", [&] { return dmuon_checkpoint_save(opt, unused.c_str(), 2, nullptr); }},
      },
      rc, 0.5 * timeout_ms, ctx);
  expect(access(unused.c_str(), F_OK) != 0, "dmuon_checkpoint_save created " + unused);

  const Clock::time_point td = Clock::now();
  expect(dmuon_optimizer_destroy(&opt) == DMUON_SUCCESS && opt == nullptr, "optimizer_destroy");
  expect(dmuon_context_destroy(&ctx) == DMUON_SUCCESS && ctx == nullptr, "context_destroy");
  const double destroy_ms = ms_since(td);
  expect(destroy_ms < 0.5 * timeout_ms, "destroy after the failure took " + std::to_string(destroy_ms) + " ms");
  finish(rank);
}
