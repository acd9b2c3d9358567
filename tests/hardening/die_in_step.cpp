// A rank dies inside a step; the survivors must get a status, not a hang.
//
//   die_in_step <point> <verdict_dir> <victim_rank> <timeout_ms>
//
// point: adam_allreduce | muon_reduce_scatter | grad_norm | muon_allgather.
// Every rank takes one good step, then the victim kills itself (SIGKILL, no
// clean-up of any kind) on entering the MPI collective named by <point> in the
// second step. Each survivor checks that its dmuon_step returned
// DMUON_ERR_TIMEOUT no earlier than the timeout and not much later, that the
// next step fails at once with the same status, that the optimizer and context
// can still be destroyed, and writes its verdict to <verdict_dir>/rank<r>.txt.
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

// The fault injector (die_inject.cpp): arms the calling rank to kill itself
// on entering the named collective.
extern "C" void dmuon_test_arm_death(const char* point);

namespace {

std::string g_verdict_path;
std::string g_failures;

void expect(bool ok, const std::string& what) {
  if (!ok) g_failures += what + "; ";
}

// The verdict is the test's only output that counts; write it and leave
// without MPI_Finalize, which is collective and so undefined with a dead rank.
[[noreturn]] void finish(int rank) {
  FILE* f = std::fopen(g_verdict_path.c_str(), "w");
  if (f) {
    std::fprintf(f, "%s\n", g_failures.empty() ? "OK" : ("FAIL " + g_failures).c_str());
    std::fclose(f);
  }
  std::printf("rank %d verdict: %s\n", rank, g_failures.empty() ? "OK" : g_failures.c_str());
  std::fflush(stdout);
  _exit(g_failures.empty() ? 0 : 1);
}

void fill_gradients(dmuon_optimizer_t opt, int nparams, int rank, int step) {
  for (int id = 0; id < nparams; ++id) {
    void* g = nullptr;
    int64_t n = 0;
    dmuon_param_view(opt, id, nullptr, &g);
    dmuon_param_numel(opt, id, &n);
    float* gf = static_cast<float*>(g);
    for (int64_t i = 0; i < n; ++i) gf[i] = 0.01f * static_cast<float>((i * 7 + id * 3 + rank + step) % 11) - 0.05f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <point> <verdict_dir> <victim_rank> <timeout_ms>\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  g_verdict_path = std::string(argv[2]) + "/rank" + std::to_string(rank) + ".txt";
  const int victim = std::atoi(argv[3]);
  const int timeout_ms = std::atoi(argv[4]);
  std::remove(g_verdict_path.c_str());  // a verdict must come from this run
  MPI_Barrier(MPI_COMM_WORLD);

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.collective_timeout_ms = timeout_ms;
  o.max_grad_norm = 1.0;  // so that the step has the norm all-reduce too
  expect(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx) == DMUON_SUCCESS, "context_create");
  expect(dmuon_optimizer_create(ctx, &o, &opt) == DMUON_SUCCESS, "optimizer_create");
  // One Muon matrix per rank (each rank owns one) and an Adam vector.
  const int64_t mat[2] = {16, 8}, vec[1] = {37};
  int nparams = 0;
  for (int m = 0; m < size; ++m, ++nparams)
    dmuon_register(opt, ("w" + std::to_string(m)).c_str(), DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, mat, 1, 1, nullptr);
  dmuon_register(opt, "bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, vec, 1, 1, nullptr);
  ++nparams;
  expect(dmuon_optimizer_finalize(opt) == DMUON_SUCCESS, "finalize");
  if (!g_failures.empty()) finish(rank);

  fill_gradients(opt, nparams, rank, 0);
  expect(dmuon_step(opt) == DMUON_SUCCESS, std::string("first step: ") + dmuon_context_last_error(ctx));

  fill_gradients(opt, nparams, rank, 1);
  if (rank == victim) dmuon_test_arm_death(argv[1]);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  const int rc = dmuon_step(opt);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (rank == victim) {
    g_failures += std::string("the victim did not die at ") + argv[1];
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

  // Poisoned: the next step fails at once with the same status.
  const Clock::time_point t1 = Clock::now();
  const int rc2 = dmuon_step(opt);
  const double ms2 = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  expect(rc2 == DMUON_ERR_TIMEOUT, "step after the failure returned " + std::to_string(rc2));
  expect(ms2 < 0.5 * timeout_ms, "step after the failure waited " + std::to_string(ms2) + " ms");
  expect(std::string(dmuon_context_last_error(ctx)).find("not attempted") != std::string::npos,
         "second failure message: " + std::string(dmuon_context_last_error(ctx)));
  int64_t steps = -1;
  expect(dmuon_get_step_count(opt, &steps) == DMUON_SUCCESS, "step count after the failure");

  // And everything can still be destroyed.
  expect(dmuon_optimizer_destroy(&opt) == DMUON_SUCCESS && opt == nullptr, "optimizer_destroy");
  expect(dmuon_context_destroy(&ctx) == DMUON_SUCCESS && ctx == nullptr, "context_destroy");
  finish(rank);
}
