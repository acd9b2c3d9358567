// The optimizer: registered parameters, flat storage in backend memory, and
// the step, written once for every backend.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/context.hpp"
#include "core/grad_marks.hpp"
#include "core/lr_schedule.hpp"
#include "core/options.hpp"
#include "core/plan.hpp"
#include "core/registry.hpp"
#include "core/state.hpp"
#include "core/storage.hpp"

namespace dmuon {

class Optimizer {
 public:
  Optimizer(dmuon_context_s* ctx, const dmuon_options_t& options);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  int add_param(const char* name, int kind, int dtype, int ndim, const int64_t* shape, double lr_mul, double wd_mul);
  void finalize();
  void step();

  void param_view(int id, void** data, void** grad);
  void set_external_grad(int id, const void* grad);
  void mark_no_grad(int id);
  int owner(int id) const;
  int64_t state_bytes() const;
  int64_t step_count() const;
  dmuon_clip_stats_t clip_stats() const;

  // Setters validate and then store; they take effect from the next step.
  void set_options(const dmuon_options_t& o);
  const dmuon_options_t& options() const { return options_; }

  bool finalized() const { return finalized_; }
  ParamRecord& param(int id);
  const Registry& registry() const { return registry_; }
  const GradMarks& grad_marks() const { return grad_marks_; }
  dmuon_context_s* context() const { return ctx_; }
  Backend& backend() const { return *ctx_->backend; }
  const Layout& layout() const { return layout_; }

  // Flat storage, for the checkpoint code (hdf5_io) and the tests.
  const AdamBuffers& adam_buffers(Dtype d) const { return storage_.adam[static_cast<int>(d)]; }
  const MuonBuffers& muon_buffers(Dtype d) const { return storage_.muon[static_cast<int>(d)]; }
  int64_t* adam_steps() const { return storage_.adam_steps; }  // backend memory, one per Adam row
  StepStats* stats() const { return storage_.stats; }          // backend memory
  // The backend's per-optimizer state (null before the first step, and on
  // backends that keep none); the GPU tests read its diagnostics.
  StepState* step_state() const { return step_state_.get(); }
  // Re-plan with a given owner list: always new storage (allocated before the
  // old is freed: short of memory, nothing changes), so every view moves and
  // views_epoch() grows. A restore goes through StateAccess instead.
  void replan(const std::vector<int>& owners);
  // Master weights (option master_weights): zeroes them, so that the next
  // step reads every master from its bf16 parameter (master_or_param in
  // core/dtype.hpp). After dmuon_broadcast_params, and after a restore from a
  // file without masters.
  void reset_master_weights();
  // Whether the parameters of dtype d have masters (the same on every rank).
  bool has_masters(Dtype d) const { return options_.master_weights && d == Dtype::bf16; }
  // How many times the flat storage moved since finalize (dmuon_views_epoch):
  // views taken at one epoch stay valid while it lasts.
  int64_t views_epoch() const { return views_epoch_; }
  // The INFO message of a plan change (replan, a restore onto another plan).
  void tell_storage_moved() const;

  // Gradient accumulation (optimizer_training.cpp).
  void zero_grad();
  void set_grad_accumulation(int micro_batches);
  int grad_accumulation() const { return accumulation_; }
  int pending_micro_batches() const { return pending_micro_; }

  // Learning-rate schedules, one slot per group, indexed by dmuon_kind_t
  // (optimizer_training.cpp). A restore installs the saved ones.
  using LrSchedules = dmuon::LrSchedules;
  void set_lr_schedule(int kind, const dmuon_lr_schedule_t* schedule);
  void clear_lr_schedule(int kind) { lr_schedules_.at(static_cast<std::size_t>(kind)).reset(); }
  const LrSchedules& lr_schedules() const { return lr_schedules_; }
  void install_lr_schedules(const LrSchedules& s) { lr_schedules_ = s; }

  // Metrics reduced with the step (optimizer_training.cpp).
  void metrics_submit(int n, const double* values, int op);
  void metrics_get(int n, double* values) const;

  std::map<std::string, std::string> user_attributes;      // saved with checkpoints
  std::map<std::string, std::string> restored_attributes;  // read by the last restore

 private:
  // The checkpoint code's boundary (core/state.hpp) reaches the state
  // through these two and the accessors above.
  friend class StateAccess;
  // What adopting `plan` needs, made beside the current state: with `fresh`,
  // new storage carrying the step statistics over (else the current storage
  // stays, for the same plan). Throws; nothing changes.
  PreparedState prepare(const Plan& plan, bool fresh) const;
  // Takes the plan and the prepared storage; the old storage is freed.
  void adopt(Plan&& plan, PreparedState&& prepared) noexcept;
  void refresh_step_scalars();
  void zero_grad_buffers();
  // The StepStats field that folds 1/micro-batches into the updates.
  void store_accumulation_in_stats();
  // The step's learning rates from the schedules, and their advance after it.
  void apply_lr_schedules();
  void advance_lr_schedules();
  // Inside the step: copies and all-reduces a pending metrics submission.
  void reduce_metrics();
  void release_metrics() noexcept;

  dmuon_context_s* ctx_;
  dmuon_options_t options_;
  Registry registry_;
  Layout layout_;
  bool finalized_ = false;
  int64_t views_epoch_ = 0;

  Storage storage_;
  // Made at the first step, dropped when the storage changes (its graphs hold
  // the storage's addresses); declared after storage_, so destroyed before it.
  StepStatePtr step_state_;

  std::vector<AdamScalarRow> adam_rows_;      // host copy of the scalar table
  std::vector<AdamRowSource> adam_sources_;   // indexed like adam_rows_
  // The Adam options the rows' scalars were written from (none: not written
  // since the plan), and whether gradient marks took part.
  std::optional<std::array<double, 5>> adam_scalars_;
  bool adam_rows_marked_ = false;
  GradMarks grad_marks_;
  std::vector<MuonShapeBatch> muon_batches_;  // this rank's owned matrices, grouped by shape

  int accumulation_ = 1;   // micro-batches per step
  int pending_micro_ = 0;  // micro-batches counted in the current cycle
  LrSchedules lr_schedules_;
  struct Metrics {
    const double* pending = nullptr;  // backend memory, read by the next updating step
    int pending_n = 0, pending_op = 0;
    double* reduced = nullptr;        // backend memory, DMUON_MAX_METRICS sums
    int reduced_n = 0, reduced_op = 0;  // of the last step that carried a submission
  } metrics_;
};


}  // namespace dmuon

struct dmuon_optimizer_s {
  uint32_t magic = kOptimizerMagic;
  dmuon::Optimizer impl;
  dmuon_optimizer_s(dmuon_context_s* ctx, const dmuon_options_t& o) : impl(ctx, o) {}
};
