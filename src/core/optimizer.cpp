#include "core/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/error.hpp"
#include "core/nvtx.hpp"

namespace dmuon {

Optimizer::Optimizer(dmuon_context_s* ctx, const dmuon_options_t& options) : ctx_(ctx), options_(options) {
  validate_options(options_);
}

Optimizer::~Optimizer() { release_metrics(); }

int Optimizer::add_param(const char* name, int kind, int dtype, int ndim, const int64_t* shape, double lr_mul,
                         double wd_mul) {
  require(!finalized_, DMUON_ERR_ALREADY_FINALIZED, "dmuon_register: the optimizer is finalized; register before dmuon_optimizer_finalize");
  return registry_.add(name, kind, dtype, ndim, shape, lr_mul, wd_mul);
}

ParamRecord& Optimizer::param(int id) {
  require(id >= 0 && static_cast<std::size_t>(id) < registry_.size(), DMUON_ERR_INVALID_PARAM_ID,
          "parameter id " + std::to_string(id) + " is out of range (" + std::to_string(registry_.size()) +
              " registered)");
  return registry_[static_cast<std::size_t>(id)];
}

void Optimizer::finalize() {
  require(!finalized_, DMUON_ERR_ALREADY_FINALIZED, "dmuon_optimizer_finalize: already finalized");
  // The comparison below is collective: on a poisoned context a rank is gone.
  backend().check_not_failed("dmuon_optimizer_finalize");
  // Emptiness is checked collectively too, as part of the list comparison.
  registry_.check_identical_across(ctx_->comm);
  require(registry_.size() > 0, DMUON_ERR_NO_PARAMETERS, "dmuon_optimizer_finalize: no parameter was registered");
  Plan plan = make_plan(registry_.all(), ctx_->size);
  PreparedState prepared = prepare(plan, true);
  adopt(std::move(plan), std::move(prepared));
  finalized_ = true;
  store_accumulation_in_stats();
}

PreparedState Optimizer::prepare(const Plan& plan, bool fresh) const {
  PreparedState ready;
  ready.muon_batches = muon_batches_for(plan, ctx_->rank);
  const std::size_t rows = static_cast<std::size_t>(plan.layout.num_adam_rows);
  ready.adam_rows.resize(rows);
  ready.adam_sources.resize(rows);
  for (std::size_t i = 0; i < plan.params.size(); ++i) {
    const ParamRecord& p = plan.params[i];
    if (p.kind != Kind::adam) continue;
    const std::size_t k = static_cast<std::size_t>(p.adam_row);
    AdamScalarRow& r = ready.adam_rows[k];
    r.offset = p.offset;
    r.numel = p.numel;
    r.dtype = static_cast<int32_t>(p.dtype);
    ready.adam_sources[k] = AdamRowSource{static_cast<int>(i), p.lr_mul, p.wd_mul};
  }
  if (!fresh) return ready;
  ready.fresh = true;
  ready.storage = Storage(backend(), plan.layout, options_.master_weights != 0);
  if (storage_.stats) {  // the step statistics are not part of the plan: they carry over
    StepStats stats;
    backend().download(&stats, storage_.stats, sizeof stats);
    backend().upload(ready.storage.stats, &stats, sizeof stats);
  }
  return ready;
}

void Optimizer::adopt(Plan&& plan, PreparedState&& prepared) noexcept {
  registry_.all().swap(plan.params);
  layout_ = plan.layout;
  muon_batches_.swap(prepared.muon_batches);
  adam_rows_.swap(prepared.adam_rows);
  adam_sources_.swap(prepared.adam_sources);
  adam_scalars_ = std::nullopt;  // the new rows hold no scalars yet
  if (prepared.fresh) {
    step_state_.reset();  // first: its graphs and workspaces refer to the old storage
    storage_.swap(prepared.storage);  // the old storage is freed with `prepared`
    if (finalized_) ++views_epoch_;
  }
}

void Optimizer::replan(const std::vector<int>& owners) {
  Plan plan = make_plan(registry_.all(), ctx_->size, owners);
  // Always new storage, even for the same owners: the caller asked for it.
  PreparedState prepared = prepare(plan, true);
  adopt(std::move(plan), std::move(prepared));
  tell_storage_moved();
}

void Optimizer::tell_storage_moved() const {
  backend().message(DMUON_MESSAGE_INFO, "the Muon ownership plan changed: the flat storage was allocated again, "
                                        "so views taken before this call are invalid (dmuon_views_epoch grew)");
}

void Optimizer::refresh_step_scalars() {
  const dmuon_options_t& o = options_;
  // The rows keep their scalars from the last step unless an option or a
  // gradient mark changes them: a model of many small tensors then spends
  // no host time per tensor here.
  const std::array<double, 5> adam = {o.adam_lr, o.adam_beta1, o.adam_beta2, o.adam_eps, o.adam_weight_decay};
  if (adam_scalars_ != adam || adam_rows_marked_ || grad_marks_.any()) {
    for (std::size_t k = 0; k < adam_rows_.size(); ++k) {
      AdamScalarRow& r = adam_rows_[k];
      const AdamRowSource& s = adam_sources_[k];
      r.active = grad_marks_.has_grad(static_cast<std::size_t>(s.param_id)) ? 1 : 0;
      r.beta1 = static_cast<float>(o.adam_beta1);
      r.beta2 = static_cast<float>(o.adam_beta2);
      r.eps = static_cast<float>(o.adam_eps);
      r.lr = static_cast<float>(o.adam_lr * s.lr_mul);
      r.weight_decay = static_cast<float>(o.adam_weight_decay * s.wd_mul);
    }
    adam_scalars_ = adam;
    adam_rows_marked_ = grad_marks_.any();
  }
  for (MuonShapeBatch& batch : muon_batches_) {
    const double rows = static_cast<double>(batch.rows), cols = static_cast<double>(batch.cols);
    const double scale = o.muon_scale == DMUON_SCALE_ORIGINAL ? std::sqrt(std::max(1.0, rows / cols))
                                                              : 0.2 * std::sqrt(std::max(rows, cols));
    for (MuonMatrix& m : batch.matrices) {
      const ParamRecord& p = registry_[static_cast<std::size_t>(m.param_id)];
      const double lr = o.muon_lr * p.lr_mul;
      m.lr = static_cast<float>(lr * scale);
      m.decay = static_cast<float>(1.0 - lr * o.muon_weight_decay * p.wd_mul);
      m.active = grad_marks_.has_grad(static_cast<std::size_t>(m.param_id)) ? 1 : 0;
    }
  }
}

void Optimizer::step() {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_step: call dmuon_optimizer_finalize first");
  Backend& b = backend();
  // Before touching anything: a poisoned context fails the step at once, with
  // the state as the failure left it (a backend whose step only enqueues work
  // would otherwise queue it behind the abandoned operation).
  b.check_not_failed("dmuon_step");
  const int world = ctx_->size;
  // Accumulation: every call but the last of a cycle only counts.
  if (accumulation_ > 1 && ++pending_micro_ < accumulation_) return;
  const NvtxRange step_range("dmuon_step");
  pending_micro_ = 0;
  apply_lr_schedules();

  // What decides the sequence of backend calls below (beyond the options):
  // a backend that replays a captured step must re-capture when it changes.
  uint64_t structure = 1469598103934665603ull;  // FNV-1a
  structure = (structure ^ grad_marks_.hash()) * 1099511628211ull;  // which gradients are copied in or zeroed
  structure = (structure ^ static_cast<uint64_t>(accumulation_ > 1)) * 1099511628211ull;  // zeroes the gradients
  structure = (structure ^ reinterpret_cast<uintptr_t>(metrics_.pending)) * 1099511628211ull;
  structure = (structure ^ static_cast<uint64_t>(metrics_.pending_n)) * 1099511628211ull;
  b.set_collective_timeout(options_.collective_timeout_ms);
  if (!step_state_) step_state_ = b.make_step_state();
  b.begin_step(step_state_.get(), options_, structure);
  struct StepBracket {  // closes the step when a call below throws
    Backend& b;
    StepState* key;
    bool open = true;
    ~StepBracket() {
      if (!open) return;
      try {
        b.end_step(key, false);
      } catch (...) {  // the first error is the one reported
      }
    }
  } bracket{b, step_state_.get()};

  // 1. External gradients into the flat buffers; parameters without a
  //    gradient contribute zeros (to the average and to the norm).
  std::optional<NvtxRange> phase(std::in_place, "dmuon: gradients in");
  if (grad_marks_.any()) {
    for (std::size_t i = 0; i < registry_.size(); ++i) {
      const bool has_grad = grad_marks_.has_grad(i);
      const void* external = grad_marks_.external(i);
      if (has_grad && !external) continue;
      const ParamRecord& p = registry_[i];
      void* grad = nullptr;
      param_view(static_cast<int>(i), nullptr, &grad);
      const std::size_t bytes = static_cast<std::size_t>(p.numel) * dtype_size(p.dtype);
      if (!has_grad)
        b.zero(grad, bytes);
      else
        b.copy(grad, external, bytes);
    }
  }

  // 2. Average the gradients: Adam replicated, Muon onto its owners.
  phase.reset();
  phase.emplace("dmuon: reduce gradients");
  float adam_grad_scale[kNumDtypes];
  for (int d = 0; d < kNumDtypes; ++d) {
    const bool sum = world > 1 && b.allreduce_leaves_sum(static_cast<Dtype>(d));
    adam_grad_scale[d] = sum ? 1.0f / static_cast<float>(world) : 1.0f;
    const Dtype dt = static_cast<Dtype>(d);
    if (storage_.adam[d].elements) b.allreduce_gradients(storage_.adam[d].grad, storage_.adam[d].elements, dt);
    if (storage_.muon[d].segment_elements) b.reduce_scatter_average(storage_.muon[d].grad, storage_.muon[d].segment_elements, dt);
  }

  // 3. Global norm over the owned Muon shards and the Adam gradients (counted
  //    once, by rank 0), one scalar all-reduce, statistics kept in backend memory.
  phase.reset();
  phase.emplace("dmuon: norm, clip, metrics");
  const bool norm = options_.max_grad_norm > 0 || options_.skip_nonfinite;
  if (norm) {
    b.zero(&storage_.stats->sumsq, sizeof(double));
    for (int d = 0; d < kNumDtypes; ++d) {
      const Dtype dt = static_cast<Dtype>(d);
      const int64_t seg = storage_.muon[d].segment_elements;
      if (seg) b.accumulate_sumsq(storage_.muon[d].grad, dt, ctx_->rank * seg, seg, 1.0, storage_.stats);
      if (ctx_->rank == 0 && storage_.adam[d].elements)
        b.accumulate_sumsq(storage_.adam[d].grad, dt, 0, storage_.adam[d].elements, adam_grad_scale[d], storage_.stats);
    }
    if (world > 1) b.allreduce_sum_f64(&storage_.stats->sumsq, 1);
  }
  b.finish_stats(storage_.stats, options_.max_grad_norm, options_.skip_nonfinite, norm ? 1 : 0, !adam_rows_.empty());
  reduce_metrics();

  // 4-5. Updates; both read the clip coefficient and the skip guard from
  //      backend memory, so nothing here waits for the device.
  refresh_step_scalars();
  const MuonHyper hyper{static_cast<float>(options_.muon_momentum), options_.muon_nesterov, options_.muon_ns_steps,
                        options_.muon_ns_schedule, static_cast<float>(options_.muon_ns_eps), options_.cuda_graphs,
                        options_.muon_ns_symmetric};
  phase.reset();
  phase.emplace("dmuon: muon update");
  if (!muon_batches_.empty()) b.muon_update(storage_.muon, muon_batches_, hyper, storage_.stats);
  phase.reset();
  phase.emplace("dmuon: adam update");
  if (!adam_rows_.empty()) b.adam_update(storage_.adam, adam_grad_scale, adam_rows_.data(), static_cast<int>(adam_rows_.size()), storage_.adam_steps, storage_.stats);

  // 6. Publish the updated Muon matrices.
  phase.reset();
  phase.emplace("dmuon: all-gather");
  for (int d = 0; d < kNumDtypes; ++d)
    if (storage_.muon[d].segment_elements) b.allgather(storage_.muon[d].param, storage_.muon[d].segment_elements, static_cast<Dtype>(d));
  // The next accumulation cycle adds into zeroed gradients (stream-ordered).
  if (accumulation_ > 1) zero_grad_buffers();

  phase.reset();
  bracket.open = false;
  b.end_step(step_state_.get(), true);
  advance_lr_schedules();
  grad_marks_.step_done();
}

void Optimizer::param_view(int id, void** data, void** grad) {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_param_view: call dmuon_optimizer_finalize first");
  const ParamRecord& p = param(id);
  const int d = static_cast<int>(p.dtype);
  const std::size_t off = static_cast<std::size_t>(p.offset) * dtype_size(p.dtype);
  char* base_p = static_cast<char*>(p.kind == Kind::muon ? storage_.muon[d].param : storage_.adam[d].param);
  char* base_g = static_cast<char*>(p.kind == Kind::muon ? storage_.muon[d].grad : storage_.adam[d].grad);
  if (data) *data = base_p + off;
  if (grad) *grad = base_g + off;
}

void Optimizer::set_external_grad(int id, const void* grad) {
  param(id);  // validates the id
  grad_marks_.set_external(static_cast<std::size_t>(id), grad);
}

void Optimizer::mark_no_grad(int id) {
  param(id);  // validates the id
  grad_marks_.mark_no_grad(static_cast<std::size_t>(id));
}

int Optimizer::owner(int id) const {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_param_owner: call dmuon_optimizer_finalize first");
  require(id >= 0 && static_cast<std::size_t>(id) < registry_.size(), DMUON_ERR_INVALID_PARAM_ID,
          "parameter id " + std::to_string(id) + " is out of range");
  return registry_[static_cast<std::size_t>(id)].owner;
}

int64_t Optimizer::state_bytes() const {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_state_bytes: call dmuon_optimizer_finalize first");
  int64_t bytes = 0;
  for (int d = 0; d < kNumDtypes; ++d) {
    bytes += 4 * (storage_.muon[d].segment_elements + 2 * storage_.adam[d].elements);
    if (storage_.muon[d].master) bytes += 4 * storage_.muon[d].segment_elements;
    if (storage_.adam[d].master) bytes += 4 * storage_.adam[d].elements;
  }
  return bytes;
}

int64_t Optimizer::step_count() const {
  if (!finalized_) return 0;
  StepStats s;
  backend().download(&s, storage_.stats, sizeof s);
  return s.steps_taken;
}

dmuon_clip_stats_t Optimizer::clip_stats() const {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_get_clip_stats: call dmuon_optimizer_finalize first");
  StepStats s;
  backend().download(&s, storage_.stats, sizeof s);
  // clip_coef holds the factor applied, 1/micro-batches included: report the clip alone.
  return dmuon_clip_stats_t{s.total_norm, s.clip_coef / accumulation_scale(s), s.clipped, s.found_inf, s.skip};
}

void Optimizer::set_options(const dmuon_options_t& o) {
  validate_options(o);
  // The masters are storage, allocated (or not) at finalize.
  require(!finalized_ || o.master_weights == options_.master_weights, DMUON_ERR_ALREADY_FINALIZED,
          "master_weights is fixed at dmuon_optimizer_finalize; set it in the options before finalizing");
  options_ = o;
}

void Optimizer::reset_master_weights() {
  for (int d = 0; d < kNumDtypes; ++d) {
    const AdamBuffers& a = storage_.adam[d];
    const MuonBuffers& m = storage_.muon[d];
    if (a.master) backend().zero(a.master, static_cast<std::size_t>(a.elements) * 4);
    if (m.master) backend().zero(m.master, static_cast<std::size_t>(m.segment_elements) * 4);
  }
}

}  // namespace dmuon
