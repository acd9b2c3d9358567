// What online training adds around the step: gradient zeroing and
// accumulation over micro-batches, learning-rate schedules, metrics reduced
// with the step.
#include <cstddef>
#include <cstring>

#include "core/error.hpp"
#include "core/optimizer.hpp"

namespace dmuon {

void Optimizer::zero_grad_buffers() {
  Backend& b = backend();
  for (int d = 0; d < kNumDtypes; ++d) {
    const std::size_t es = dtype_size(static_cast<Dtype>(d));
    if (storage_.adam[d].elements) b.zero(storage_.adam[d].grad, static_cast<std::size_t>(storage_.adam[d].elements) * es);
    const int64_t nm = layout_.muon[d].total_elements();
    if (nm) b.zero(storage_.muon[d].grad, static_cast<std::size_t>(nm) * es);
  }
}

void Optimizer::zero_grad() {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_zero_grad: call dmuon_optimizer_finalize first");
  backend().check_not_failed("dmuon_zero_grad");
  zero_grad_buffers();
  pending_micro_ = 0;
}

void Optimizer::set_grad_accumulation(int micro_batches) {
  require(micro_batches >= 1, DMUON_ERR_INVALID_VALUE,
          "dmuon_set_grad_accumulation: micro_batches must be >= 1 (1 turns accumulation off)");
  require(pending_micro_ == 0, DMUON_ERR_INVALID_VALUE,
          "dmuon_set_grad_accumulation: " + std::to_string(pending_micro_) +
              " micro-batches of the current cycle are pending; change it after a step or dmuon_zero_grad");
  const int previous = accumulation_;
  accumulation_ = micro_batches;
  try {
    store_accumulation_in_stats();
  } catch (...) {
    accumulation_ = previous;
    throw;
  }
}

// The updates read the factor from backend memory (StepStats), so a replayed
// step picks up a change without a re-capture; written only when it changes.
void Optimizer::store_accumulation_in_stats() {
  if (!finalized_) return;  // finalize writes it
  StepStats s;
  backend().download(&s, storage_.stats, sizeof s);
  if (s.grad_accumulation == accumulation_ || (s.grad_accumulation <= 1 && accumulation_ == 1)) return;
  s.grad_accumulation = accumulation_;
  backend().upload(storage_.stats, &s, sizeof s);
}

namespace {
double& group_lr(dmuon_options_t& o, int kind) { return kind == DMUON_KIND_MUON ? o.muon_lr : o.adam_lr; }
}  // namespace

void Optimizer::set_lr_schedule(int kind, const dmuon_lr_schedule_t* schedule) {
  const char* call = "dmuon_set_lr_schedule";
  require(kind == DMUON_KIND_MUON || kind == DMUON_KIND_ADAM, DMUON_ERR_INVALID_KIND,
          std::string(call) + ": kind must be DMUON_KIND_MUON or DMUON_KIND_ADAM");
  if (!schedule) {
    clear_lr_schedule(kind);
    return;
  }
  require(schedule->magic == DMUON_OPTIONS_MAGIC && schedule->version >= 1 &&
              schedule->struct_size >= sizeof(dmuon_lr_schedule_t),
          DMUON_ERR_OPTIONS_VERSION, std::string(call) + ": the schedule was not initialised with DMUON_LR_SCHEDULE_INIT");
  LrSchedule s;
  std::memcpy(&s.spec, schedule, sizeof s.spec);
  s.spec.struct_size = sizeof s.spec;
  validate_lr_schedule(s.spec, call);
  if (s.spec.base_lr < 0) s.spec.base_lr = group_lr(options_, kind);
  lr_schedules_[static_cast<std::size_t>(kind)] = s;
}

void Optimizer::apply_lr_schedules() {
  for (int kind = 0; kind < 2; ++kind) {
    const std::optional<LrSchedule>& s = lr_schedules_[static_cast<std::size_t>(kind)];
    if (s) group_lr(options_, kind) = scheduled_lr(s->spec, s->steps);
  }
}

void Optimizer::advance_lr_schedules() {
  for (std::optional<LrSchedule>& s : lr_schedules_)
    if (s) ++s->steps;
}

void Optimizer::metrics_submit(int n, const double* values, int op) {
  require(values != nullptr, DMUON_ERR_NULL_POINTER, "dmuon_metrics_submit: values is NULL");
  require(n >= 1 && n <= DMUON_MAX_METRICS, DMUON_ERR_INVALID_VALUE,
          "dmuon_metrics_submit: n must be 1.." + std::to_string(DMUON_MAX_METRICS));
  require(op == DMUON_METRICS_SUM || op == DMUON_METRICS_MEAN, DMUON_ERR_INVALID_VALUE,
          "dmuon_metrics_submit: op must be DMUON_METRICS_SUM or DMUON_METRICS_MEAN");
  if (!metrics_.reduced) metrics_.reduced = static_cast<double*>(backend().allocate(sizeof(double) * DMUON_MAX_METRICS));
  metrics_.pending = values;
  metrics_.pending_n = n;
  metrics_.pending_op = op;
}

// One more small all-reduce in the step's queue (stream-ordered on a GPU);
// the mean's division waits for the host read, so no kernel is needed.
void Optimizer::reduce_metrics() {
  if (!metrics_.pending) return;
  Backend& b = backend();
  const std::size_t bytes = sizeof(double) * static_cast<std::size_t>(metrics_.pending_n);
  b.copy(metrics_.reduced, metrics_.pending, bytes);
  if (ctx_->size > 1) b.allreduce_sum_f64(metrics_.reduced, metrics_.pending_n);
  metrics_.reduced_n = metrics_.pending_n;
  metrics_.reduced_op = metrics_.pending_op;
  metrics_.pending = nullptr;
  metrics_.pending_n = 0;
}

void Optimizer::metrics_get(int n, double* values) const {
  require(values != nullptr, DMUON_ERR_NULL_POINTER, "dmuon_metrics_get: values is NULL");
  require(metrics_.reduced_n > 0, DMUON_ERR_NOT_FOUND, "dmuon_metrics_get: no step has reduced metrics yet");
  require(n >= 1 && n <= metrics_.reduced_n, DMUON_ERR_INVALID_VALUE,
          "dmuon_metrics_get: n must be 1.." + std::to_string(metrics_.reduced_n) + " (the number reduced)");
  backend().download(values, metrics_.reduced, sizeof(double) * static_cast<std::size_t>(n));
  if (metrics_.reduced_op == DMUON_METRICS_MEAN)
    for (int i = 0; i < n; ++i) values[i] /= ctx_->size;
}

void Optimizer::release_metrics() noexcept {
  if (!ctx_ || !ctx_->backend) return;
  ctx_->backend->release(metrics_.reduced);
  metrics_.reduced = nullptr;
}

}  // namespace dmuon
