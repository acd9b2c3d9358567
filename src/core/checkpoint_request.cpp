// Checkpoint requests: a signal handler that only sets a flag, and the
// collective that makes every rank agree on the step at which to checkpoint.
#include <csignal>

#include "core/api_guard.hpp"

using namespace dmuon;

namespace {
// Written from signal handlers: sig_atomic_t, and nothing else happens there.
volatile std::sig_atomic_t g_signal_requested = 0;
extern "C" void dmuon_on_checkpoint_signal(int) { g_signal_requested = 1; }
}  // namespace

extern "C" {

int dmuon_install_signal_handler(dmuon_context_t ctx, int signum) {
  return with_context(ctx, "dmuon_install_signal_handler", [&](dmuon_context_s& c) {
    require(signum > 0 && signum < NSIG && signum != SIGKILL && signum != SIGSTOP, DMUON_ERR_INVALID_VALUE,
            "dmuon_install_signal_handler: signal " + std::to_string(signum) + " cannot be caught");
    struct sigaction action {};
    action.sa_handler = dmuon_on_checkpoint_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    dmuon_context_s::SavedHandler saved{signum, {}};
    require(sigaction(signum, &action, &saved.previous) == 0, DMUON_ERR_INVALID_VALUE,
            "dmuon_install_signal_handler: sigaction failed");
    c.saved_handlers.push_back(saved);
  });
}

int dmuon_request_checkpoint(dmuon_context_t ctx) {
  // No allocation, no locking: safe from a signal handler.
  if (!valid(ctx)) return DMUON_ERR_NULL_HANDLE;
  ctx->checkpoint_flag = 1;
  return DMUON_SUCCESS;
}

int dmuon_checkpoint_requested(dmuon_context_t ctx, int* requested) {
  return with_context(ctx, "dmuon_checkpoint_requested", [&](dmuon_context_s& c) {
    require_out(requested, "dmuon_checkpoint_requested", "requested");
    // The all-reduce below would wait for a dead rank: a poisoned context says so at once.
    c.backend->check_not_failed("dmuon_checkpoint_requested");
    int mine = (c.checkpoint_flag || g_signal_requested) ? 1 : 0;
    int any = 0;
    require(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, c.comm) == MPI_SUCCESS, DMUON_ERR_MPI,
            "dmuon_checkpoint_requested: MPI_Allreduce failed");
    if (any) {
      c.checkpoint_flag = 0;
      g_signal_requested = 0;
    }
    *requested = any;
  });
}

}  // extern "C"
