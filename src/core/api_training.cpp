// The C ABI of what online training adds around the step (dmuon.h: gradients
// and accumulation, learning-rate schedules, metrics, messages). Each function checks its pointers, then delegates.
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

int dmuon_set_lr_schedule(dmuon_optimizer_t opt, int kind, const dmuon_lr_schedule_t* schedule) {
  return with_optimizer(opt, "dmuon_set_lr_schedule", [&](Optimizer& o) { o.set_lr_schedule(kind, schedule); });
}

int dmuon_get_lr_schedule(dmuon_optimizer_t opt, int kind, dmuon_lr_schedule_t* schedule, int64_t* steps) {
  return with_optimizer(opt, "dmuon_get_lr_schedule", [&](Optimizer& o) {
    require(kind == DMUON_KIND_MUON || kind == DMUON_KIND_ADAM, DMUON_ERR_INVALID_KIND,
            "dmuon_get_lr_schedule: kind must be DMUON_KIND_MUON or DMUON_KIND_ADAM");
    const auto& s = o.lr_schedules()[static_cast<std::size_t>(kind)];
    require(s.has_value(), DMUON_ERR_NOT_FOUND, "dmuon_get_lr_schedule: the group has no schedule");
    if (schedule) *schedule = s->spec;
    if (steps) *steps = s->steps;
  });
}

int dmuon_metrics_submit(dmuon_optimizer_t opt, int n, const double* values, int op) {
  return with_optimizer(opt, "dmuon_metrics_submit", [&](Optimizer& o) { o.metrics_submit(n, values, op); });
}

int dmuon_metrics_get(dmuon_optimizer_t opt, int n, double* values) {
  return with_optimizer(opt, "dmuon_metrics_get", [&](Optimizer& o) { o.metrics_get(n, values); });
}

int dmuon_context_set_message_callback(dmuon_context_t ctx, dmuon_message_fn fn, void* user_data) {
  return with_context(ctx, "dmuon_context_set_message_callback",
                      [&](dmuon_context_s& c) { c.backend->set_message_sink(fn, user_data); });
}

}  // extern "C"
