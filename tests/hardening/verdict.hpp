// Shared by the rank-death programs (hardening/die_in_step.cpp and
// gpu/die_in_step_cuda.cpp). With a dead rank mpirun's exit status says
// nothing (orte_enable_recovery), so each rank collects its failed checks and
// writes a verdict file, <dir>/rank<r>.txt, that check_verdicts.cmake judges.
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"

namespace verdict {

struct State {
  std::string path;
  std::string failures;
};
inline State& state() {
  static State s;
  return s;
}

// Names this rank's verdict file and removes an old one: a verdict must come from this run.
inline void open(const std::string& dir, int rank) {
  state().path = dir + "/rank" + std::to_string(rank) + ".txt";
  std::remove(state().path.c_str());
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) state().failures += what + "; ";
}

inline void write(const std::string& text) {
  if (FILE* f = std::fopen(state().path.c_str(), "w")) {
    std::fprintf(f, "%s\n", text.c_str());
    std::fclose(f);
  }
}

// The verdict is the program's only output that counts; write it and leave
// without MPI_Finalize, which is collective and so undefined with a dead rank.
[[noreturn]] inline void finish(int rank) {
  const std::string& failures = state().failures;
  write(failures.empty() ? "OK" : "FAIL " + failures);
  std::printf("rank %d verdict: %s\n", rank, failures.empty() ? "OK" : failures.c_str());
  std::fflush(stdout);
  _exit(failures.empty() ? 0 : 1);
}

// MPI start-up of a rank-death program: this rank and the world's size; with
// other than `args` arguments after the program's name, the usage line and
// MPI_Abort (exit 2).
inline void start(int& argc, char**& argv, int args, const char* usage, int& rank, int& size) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != args + 1) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

// Gradient element i of parameter `id` at `step` on `rank`: small values that
// differ by rank (so the average means something), the same in every program.
inline float grad_value(int id, int rank, int step, int64_t i) {
  return 0.01f * static_cast<float>((i * 7 + id * 3 + rank + step) % 11) - 0.05f;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One Muon matrix of shape `mat` per rank (so each rank owns one) and an Adam
// vector; returns how many parameters were registered.
inline int register_model(dmuon_optimizer_t opt, int ranks, const int64_t (&mat)[2]) {
  const int64_t vec[1] = {37};
  for (int m = 0; m < ranks; ++m)
    dmuon_register(opt, ("w" + std::to_string(m)).c_str(), DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, mat, 1, 1, nullptr);
  dmuon_register(opt, "bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, vec, 1, 1, nullptr);
  return ranks + 1;
}

struct Call {
  const char* name;
  std::function<int()> call;
};

// After the failure: each call returns `status` within `max_ms` (no wait, no
// collective) and its message says that it was not attempted.
inline void expect_fast_failures(const std::vector<Call>& calls, int status, double max_ms, dmuon_context_t ctx) {
  for (const Call& c : calls) {
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = c.call();
    const double ms = ms_since(t0);
    const std::string message = dmuon_context_last_error(ctx);
    expect(rc == status, std::string(c.name) + " after the failure returned " + std::to_string(rc) + ": " + message);
    expect(ms < max_ms, std::string(c.name) + " after the failure waited " + std::to_string(ms) + " ms");
    expect(message.find("not attempted") != std::string::npos, std::string(c.name) + " message: " + message);
  }
}

}  // namespace verdict
