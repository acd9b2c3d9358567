// The C ABI of what online training adds around the step (dmuon.h: gradients
// and accumulation). Each function checks its pointers, then delegates.
#include "core/api_guard.hpp"

using namespace dmuon;

extern "C" {

int dmuon_zero_grad(dmuon_optimizer_t opt) {
  return with_optimizer(opt, "dmuon_zero_grad", [&](Optimizer& o) { o.zero_grad(); });
}

int dmuon_set_grad_accumulation(dmuon_optimizer_t opt, int micro_batches) {
  return with_optimizer(opt, "dmuon_set_grad_accumulation",
                        [&](Optimizer& o) { o.set_grad_accumulation(micro_batches); });
}

int dmuon_get_grad_accumulation(dmuon_optimizer_t opt, int* micro_batches, int* pending) {
  return with_optimizer(opt, "dmuon_get_grad_accumulation", [&](Optimizer& o) {
    if (micro_batches) *micro_batches = o.grad_accumulation();
    if (pending) *pending = o.pending_micro_batches();
  });
}

}  // extern "C"
