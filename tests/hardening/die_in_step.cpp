// A rank dies inside a step; the survivors must get a status, not a hang.
//
//   die_in_step <point> <verdict_dir> <victim_rank> <timeout_ms>
//
// point: adam_allreduce | muon_reduce_scatter | grad_norm | muon_allgather.
// Every rank takes one good step, then the victim kills itself (SIGKILL, no
// clean-up of any kind) on entering the MPI collective named by <point> in the
// second step. Each survivor checks that its dmuon_step returned
// DMUON_ERR_TIMEOUT no earlier than the timeout and not much later, that the
// next step fails at once with the same status, as does every other call that
// would communicate (checkpoint request, save, restore, finalizing a new
// optimizer), that the optimizer and context can still be destroyed at once,
// and writes its verdict to <verdict_dir>/rank<r>.txt.
//
// mpirun's exit status cannot be the judge: with orte_enable_recovery (needed
// so that Open MPI does not kill the survivors) it is 0 whatever the ranks
// return. A second CTest step (check_verdicts.cmake) reads the files.
//
// The fault is injected through the MPI profiling interface (die_inject.cpp
// defines the collectives dmuon calls and forwards them to PMPI_*), so the
// library is tested exactly as shipped, with no test hook inside it.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dmuon/dmuon.h"
#include "hardening/verdict.hpp"

// The fault injector (die_inject.cpp): arms the calling rank to kill itself
// on entering the named collective.
extern "C" void dmuon_test_arm_death(const char* point);

namespace {

using verdict::expect;
using verdict::finish;
using Clock = std::chrono::steady_clock;

void fill_gradients(dmuon_optimizer_t opt, int nparams, int rank, int step) {
  for (int id = 0; id < nparams; ++id) {
    void* g = nullptr;
    int64_t n = 0;
    dmuon_param_view(opt, id, nullptr, &g);
    dmuon_param_numel(opt, id, &n);
    float* gf = static_cast<float*>(g);
    for (int64_t i = 0; i < n; ++i) gf[i] = verdict::grad_value(id, rank, step, i);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, size = 1;
  verdict::start(argc, argv, 4, "<point> <verdict_dir> <victim_rank> <timeout_ms>", rank, size);
  verdict::open(argv[2], rank);
  const int victim = std::atoi(argv[3]);
  const int timeout_ms = std::atoi(argv[4]);
  MPI_Barrier(MPI_COMM_WORLD);

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.collective_timeout_ms = timeout_ms;
  o.max_grad_norm = 1.0;  // so that the step has the norm all-reduce too
  expect(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx) == DMUON_SUCCESS, "context_create");
  expect(dmuon_optimizer_create(ctx, &o, &opt) == DMUON_SUCCESS, "optimizer_create");
  const int64_t mat[2] = {16, 8};
  const int nparams = verdict::register_model(opt, size, mat);
  expect(dmuon_optimizer_finalize(opt) == DMUON_SUCCESS, "finalize");
  if (!verdict::state().failures.empty()) finish(rank);

  fill_gradients(opt, nparams, rank, 0);
  expect(dmuon_step(opt) == DMUON_SUCCESS, std::string("first step: ") + dmuon_context_last_error(ctx));

  fill_gradients(opt, nparams, rank, 1);
  if (rank == victim) dmuon_test_arm_death(argv[1]);
  const Clock::time_point t0 = Clock::now();
  const int rc = dmuon_step(opt);
  const double ms = verdict::ms_since(t0);
  if (rank == victim) {
    expect(false, std::string("the victim did not die at ") + argv[1]);
    finish(rank);
  }
  const std::string message = dmuon_context_last_error(ctx);
  std::printf("rank %d: step returned %d (%s) after %.0f ms: %s\n", rank, rc, dmuon_error_string(rc), ms,
              message.c_str());
  expect(rc == DMUON_ERR_TIMEOUT, "failed step returned " + std::to_string(rc) + ", not DMUON_ERR_TIMEOUT");
  // Not before the deadline (the watchdog measured), and not long after it:
  // the slack covers a loaded CI machine with more ranks than cores.
  expect(ms >= 0.95 * timeout_ms, "returned after " + std::to_string(ms) + " ms, before the timeout");
  expect(ms <= timeout_ms + 5000.0, "returned after " + std::to_string(ms) + " ms, long after the timeout");
  expect(message.find("collective_timeout_ms") != std::string::npos, "message does not name the timeout: " + message);

  int64_t steps = -1;
  expect(dmuon_get_step_count(opt, &steps) == DMUON_SUCCESS, "step count after the failure");

  // Poisoned: the next step, and every other call that communicates and so
  // would wait for the dead rank, fails at once with the same status.
  const std::string unused = std::string(argv[2]) + "/not_written_rank" + std::to_string(rank);
  int requested = -1;
  dmuon_optimizer_t late = nullptr;
  verdict::expect_fast_failures(
      {
          {"dmuon_step", [&] { return dmuon_step(opt); }},
          {"dmuon_checkpoint_requested", [&] { return dmuon_checkpoint_requested(ctx, &requested); }},
          {"dmuon_checkpoint_save", [&] { return dmuon_checkpoint_save(opt, unused.c_str(), 2, nullptr); }},
          {"dmuon_checkpoint_restore", [&] { return dmuon_checkpoint_restore(opt, unused.c_str(), nullptr); }},
          {"dmuon_optimizer_finalize",
           [&] {  // of a new optimizer on the poisoned context
             dmuon_optimizer_create(ctx, &o, &late);
             dmuon_register(late, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, mat, 1, 1, nullptr);
             return dmuon_optimizer_finalize(late);
           }},
      },
      DMUON_ERR_TIMEOUT, 0.5 * timeout_ms, ctx);
  expect(requested == -1, "dmuon_checkpoint_requested wrote its output");
  expect(access(unused.c_str(), F_OK) != 0, "dmuon_checkpoint_save created " + unused);

  // And everything can still be destroyed, at once: no collective, no wait.
  const Clock::time_point td = Clock::now();
  expect(dmuon_optimizer_destroy(&late) == DMUON_SUCCESS && late == nullptr, "destroy of the late optimizer");
  expect(dmuon_optimizer_destroy(&opt) == DMUON_SUCCESS && opt == nullptr, "optimizer_destroy");
  expect(dmuon_context_destroy(&ctx) == DMUON_SUCCESS && ctx == nullptr, "context_destroy");
  const double ms_d = verdict::ms_since(td);
  expect(ms_d < 0.5 * timeout_ms, "destroy after the failure took " + std::to_string(ms_d) + " ms");
  finish(rank);
}
