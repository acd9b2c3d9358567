// The context: a duplicated MPI communicator, the backend chosen at run time,
// the last-error message and the checkpoint-request flag.
//
// Counted: the user's handle holds one reference and every optimizer of the
// context another (as libCEED's objects hold their Ceed), so that the
// context lives until the last of them is destroyed, in whichever order
// (Fortran finalizers run in an order the compiler picks).
#pragma once
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "backends/backend.hpp"

constexpr uint32_t kContextMagic = 0x63747864u;    // "ctxd"
constexpr uint32_t kOptimizerMagic = 0x6f707464u;  // "optd"
constexpr uint32_t kDeadMagic = 0xdeadbeefu;

struct dmuon_context_s {
  uint32_t magic = kContextMagic;
  int references = 1;          // the user's handle, plus one per live optimizer
  bool handle_released = false; // dmuon_context_destroy was called: the handle is dead to the user
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::unique_ptr<dmuon::Backend> backend;
  std::string last_error;
  // Set from signal handlers: sig_atomic_t is the only type that is safe there.
  volatile std::sig_atomic_t checkpoint_flag = 0;
  struct SavedHandler {
    int signum;
    struct sigaction previous;
  };
  std::vector<SavedHandler> saved_handlers;
};
