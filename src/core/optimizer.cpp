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

Optimizer::~Optimizer() {
  release_storage();
  release_metrics();
}

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
  std::vector<ParamRecord> planned = registry_.all();
  Layout layout = plan_layout(planned, ctx_->size);
  registry_.all() = std::move(planned);
  layout_ = layout;
  allocate_storage();
  build_muon_batches();
  finalized_ = true;
  store_accumulation_in_stats();
}

void Optimizer::replan(const std::vector<int>& owners) {
  std::vector<ParamRecord> planned = registry_.all();
  Layout layout = plan_layout(planned, ctx_->size, owners);
  // The new storage is allocated while the old one still exists, so that a
  // failed allocation (a restore onto another plan, short of memory) leaves
  // the optimizer with its plan and its state. The members are set aside,
  // the new storage allocated into them, and the old one freed last.
  AdamBuffers old_adam[kNumDtypes];
  MuonBuffers old_muon[kNumDtypes];
  for (int d = 0; d < kNumDtypes; ++d) {
    old_adam[d] = std::exchange(adam_[d], AdamBuffers{});
    old_muon[d] = std::exchange(muon_[d], MuonBuffers{});
  }
  int64_t* old_steps = std::exchange(adam_steps_, nullptr);
  StepStats* old_stats = std::exchange(stats_, nullptr);
  std::vector<ParamRecord> old_params = std::exchange(registry_.all(), std::move(planned));
  const Layout old_layout = std::exchange(layout_, layout);
  const auto swap_old = [&] {
    for (int d = 0; d < kNumDtypes; ++d) {
      std::swap(adam_[d], old_adam[d]);
      std::swap(muon_[d], old_muon[d]);
    }
    std::swap(adam_steps_, old_steps);
    std::swap(stats_, old_stats);
  };
  try {
    allocate_storage();  // releases what it got before it throws
    // The step statistics are not part of the plan: they carry over.
    StepStats stats;
    backend().download(&stats, old_stats, sizeof stats);
    backend().upload(stats_, &stats, sizeof stats);
  } catch (...) {
    release_storage();
    swap_old();
    registry_.all() = std::move(old_params);
    layout_ = old_layout;
    throw;
  }
  swap_old();
  release_storage();  // the old storage
  swap_old();
  build_muon_batches();
  ++views_epoch_;
  backend().message(DMUON_MESSAGE_INFO, "the Muon ownership plan changed: the flat storage was allocated again, "
                                        "so views taken before this call are invalid (dmuon_views_epoch grew)");
}

void Optimizer::allocate_storage() {
  Backend& b = backend();
  try {
    for (int d = 0; d < kNumDtypes; ++d) {
      const std::size_t es = dtype_size(static_cast<Dtype>(d));
      const int64_t na = layout_.adam_elements[d];
      adam_[d].elements = na;
      adam_[d].param = b.allocate(static_cast<std::size_t>(na) * es);
      adam_[d].grad = b.allocate(static_cast<std::size_t>(na) * es);
      adam_[d].exp_avg = static_cast<float*>(b.allocate(static_cast<std::size_t>(na) * 4));
      adam_[d].exp_avg_sq = static_cast<float*>(b.allocate(static_cast<std::size_t>(na) * 4));
      const int64_t seg = layout_.muon[d].segment_elements;
      const int64_t nm = layout_.muon[d].total_elements();
      muon_[d].segment_elements = seg;
      muon_[d].param = b.allocate(static_cast<std::size_t>(nm) * es);
      muon_[d].grad = b.allocate(static_cast<std::size_t>(nm) * es);
      muon_[d].momentum = static_cast<float*>(b.allocate(static_cast<std::size_t>(seg) * 4));
      // Zero-filled masters: the first step reads them from the parameters.
      if (has_masters(static_cast<Dtype>(d))) {
        adam_[d].master = static_cast<float*>(b.allocate(static_cast<std::size_t>(na) * 4));
        muon_[d].master = static_cast<float*>(b.allocate(static_cast<std::size_t>(seg) * 4));
      }
    }
    adam_steps_ = static_cast<int64_t*>(b.allocate(sizeof(int64_t) * static_cast<std::size_t>(std::max(1, layout_.num_adam_rows))));
    stats_ = static_cast<StepStats*>(b.allocate(sizeof(StepStats)));
  } catch (...) {
    release_storage();
    throw;
  }
}

void Optimizer::release_storage() noexcept {
  if (!ctx_ || !ctx_->backend) return;
  Backend& b = *ctx_->backend;
  step_state_.reset();  // first: its graphs and workspaces refer to the buffers below
  for (int d = 0; d < kNumDtypes; ++d) {
    b.release(adam_[d].param);
    b.release(adam_[d].grad);
    b.release(adam_[d].exp_avg);
    b.release(adam_[d].exp_avg_sq);
    b.release(muon_[d].param);
    b.release(muon_[d].grad);
    b.release(muon_[d].momentum);
    b.release(adam_[d].master);
    b.release(muon_[d].master);
    adam_[d] = AdamBuffers{};
    muon_[d] = MuonBuffers{};
  }
  b.release(adam_steps_);
  b.release(stats_);
  adam_steps_ = nullptr;
  stats_ = nullptr;
}

void Optimizer::build_muon_batches() {
  // Owned matrices grouped by (dtype, rows, cols), in registration order
  // inside each group, so Newton-Schulz runs batched over a group.
  std::map<std::tuple<int, int64_t, int64_t>, std::size_t> index;
  muon_batches_.clear();
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    const ParamRecord& p = registry_[i];
    if (p.kind != Kind::muon || p.owner != ctx_->rank) continue;
    const auto key = std::make_tuple(static_cast<int>(p.dtype), p.rows(), p.cols());
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, muon_batches_.size()).first;
      muon_batches_.push_back(MuonShapeBatch{p.dtype, p.rows(), p.cols(), {}});
    }
    const int64_t seg_start = static_cast<int64_t>(ctx_->rank) * layout_.muon[static_cast<int>(p.dtype)].segment_elements;
    muon_batches_[it->second].matrices.push_back(MuonMatrix{p.offset, p.offset - seg_start, static_cast<int>(i), 0.f, 1.f, 1});
  }
  adam_rows_.assign(static_cast<std::size_t>(layout_.num_adam_rows), AdamScalarRow{});
}

void Optimizer::refresh_step_scalars() {
  const dmuon_options_t& o = options_;
  for (const ParamRecord& p : registry_.all()) {
    if (p.kind != Kind::adam) continue;
    AdamScalarRow& r = adam_rows_[static_cast<std::size_t>(p.adam_row)];
    r.offset = p.offset;
    r.numel = p.numel;
    r.dtype = static_cast<int32_t>(p.dtype);
    r.active = p.has_grad ? 1 : 0;
    r.beta1 = static_cast<float>(o.adam_beta1);
    r.beta2 = static_cast<float>(o.adam_beta2);
    r.eps = static_cast<float>(o.adam_eps);
    r.lr = static_cast<float>(o.adam_lr * p.lr_mul);
    r.weight_decay = static_cast<float>(o.adam_weight_decay * p.wd_mul);
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
      m.active = p.has_grad ? 1 : 0;
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
  uint64_t structure = 1469598103934665603ull;  // FNV-1a over (has_grad, external_grad)
  structure = (structure ^ static_cast<uint64_t>(accumulation_ > 1)) * 1099511628211ull;  // zeroes the gradients
  structure = (structure ^ reinterpret_cast<uintptr_t>(metrics_.pending)) * 1099511628211ull;
  structure = (structure ^ static_cast<uint64_t>(metrics_.pending_n)) * 1099511628211ull;
  for (const ParamRecord& p : registry_.all()) {
    const uint64_t words[2] = {p.has_grad ? 1u : 0u, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p.external_grad))};
    for (uint64_t w : words) structure = (structure ^ w) * 1099511628211ull;
  }
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
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    const ParamRecord& p = registry_[i];
    if (p.has_grad && !p.external_grad) continue;
    void* grad = nullptr;
    param_view(static_cast<int>(i), nullptr, &grad);
    const std::size_t bytes = static_cast<std::size_t>(p.numel) * dtype_size(p.dtype);
    if (!p.has_grad)
      b.zero(grad, bytes);
    else
      b.copy(grad, p.external_grad, bytes);
  }

  // 2. Average the gradients: Adam replicated, Muon onto its owners.
  phase.reset();
  phase.emplace("dmuon: reduce gradients");
  for (int d = 0; d < kNumDtypes; ++d) {
    const Dtype dt = static_cast<Dtype>(d);
    if (adam_[d].elements) b.allreduce_average(adam_[d].grad, adam_[d].elements, dt);
    if (muon_[d].segment_elements) b.reduce_scatter_average(muon_[d].grad, muon_[d].segment_elements, dt);
  }

  // 3. Global norm over the owned Muon shards and the Adam gradients (counted
  //    once, by rank 0), one scalar all-reduce, statistics kept in backend memory.
  phase.reset();
  phase.emplace("dmuon: norm, clip, metrics");
  const bool norm = options_.max_grad_norm > 0 || options_.skip_nonfinite;
  if (norm) {
    b.zero(&stats_->sumsq, sizeof(double));
    for (int d = 0; d < kNumDtypes; ++d) {
      const Dtype dt = static_cast<Dtype>(d);
      const int64_t seg = muon_[d].segment_elements;
      if (seg) b.accumulate_sumsq(muon_[d].grad, dt, ctx_->rank * seg, seg, stats_);
      if (ctx_->rank == 0 && adam_[d].elements) b.accumulate_sumsq(adam_[d].grad, dt, 0, adam_[d].elements, stats_);
    }
    if (world > 1) b.allreduce_sum_f64(&stats_->sumsq, 1);
  }
  b.finish_stats(stats_, options_.max_grad_norm, options_.skip_nonfinite, norm ? 1 : 0);
  reduce_metrics();

  // 4-5. Updates; both read the clip coefficient and the skip guard from
  //      backend memory, so nothing here waits for the device.
  refresh_step_scalars();
  const MuonHyper hyper{static_cast<float>(options_.muon_momentum), options_.muon_nesterov, options_.muon_ns_steps,
                        options_.muon_ns_schedule, static_cast<float>(options_.muon_ns_eps), options_.cuda_graphs,
                        options_.muon_ns_symmetric};
  phase.reset();
  phase.emplace("dmuon: muon update");
  if (!muon_batches_.empty()) b.muon_update(muon_, muon_batches_, hyper, stats_);
  phase.reset();
  phase.emplace("dmuon: adam update");
  if (!adam_rows_.empty()) b.adam_update(adam_, adam_rows_.data(), static_cast<int>(adam_rows_.size()), adam_steps_, stats_);

  // 6. Publish the updated Muon matrices.
  phase.reset();
  phase.emplace("dmuon: all-gather");
  for (int d = 0; d < kNumDtypes; ++d)
    if (muon_[d].segment_elements) b.allgather(muon_[d].param, muon_[d].segment_elements, static_cast<Dtype>(d));
  // The next accumulation cycle adds into zeroed gradients (stream-ordered).
  if (accumulation_ > 1) zero_grad_buffers();

  phase.reset();
  bracket.open = false;
  b.end_step(step_state_.get(), true);
  advance_lr_schedules();
  for (ParamRecord& p : registry_.all()) p.has_grad = true;
}

void Optimizer::param_view(int id, void** data, void** grad) {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_param_view: call dmuon_optimizer_finalize first");
  const ParamRecord& p = param(id);
  const int d = static_cast<int>(p.dtype);
  const std::size_t off = static_cast<std::size_t>(p.offset) * dtype_size(p.dtype);
  char* base_p = static_cast<char*>(p.kind == Kind::muon ? muon_[d].param : adam_[d].param);
  char* base_g = static_cast<char*>(p.kind == Kind::muon ? muon_[d].grad : adam_[d].grad);
  if (data) *data = base_p + off;
  if (grad) *grad = base_g + off;
}

void Optimizer::set_external_grad(int id, const void* grad) { param(id).external_grad = grad; }

void Optimizer::mark_no_grad(int id) { param(id).has_grad = false; }

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
    bytes += 4 * (muon_[d].segment_elements + 2 * adam_[d].elements);
    if (muon_[d].master) bytes += 4 * muon_[d].segment_elements;
    if (adam_[d].master) bytes += 4 * adam_[d].elements;
  }
  return bytes;
}

int64_t Optimizer::step_count() const {
  if (!finalized_) return 0;
  StepStats s;
  backend().download(&s, stats_, sizeof s);
  return s.steps_taken;
}

dmuon_clip_stats_t Optimizer::clip_stats() const {
  require(finalized_, DMUON_ERR_NOT_FINALIZED, "dmuon_get_clip_stats: call dmuon_optimizer_finalize first");
  StepStats s;
  backend().download(&s, stats_, sizeof s);
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
    if (adam_[d].master) backend().zero(adam_[d].master, static_cast<std::size_t>(adam_[d].elements) * 4);
    if (muon_[d].master) backend().zero(muon_[d].master, static_cast<std::size_t>(muon_[d].segment_elements) * 4);
  }
}

}  // namespace dmuon
