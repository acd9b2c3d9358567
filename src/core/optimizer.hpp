// The optimizer: registered parameters, flat storage in backend memory, and
// the step, written once for every backend.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/context.hpp"
#include "core/options.hpp"
#include "core/plan.hpp"
#include "core/registry.hpp"

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
  dmuon_context_s* context() const { return ctx_; }
  Backend& backend() const { return *ctx_->backend; }
  const Layout& layout() const { return layout_; }

  // Flat storage, for the checkpoint code (hdf5_io) and the tests.
  const AdamBuffers& adam_buffers(Dtype d) const { return adam_[static_cast<int>(d)]; }
  const MuonBuffers& muon_buffers(Dtype d) const { return muon_[static_cast<int>(d)]; }
  int64_t* adam_steps() const { return adam_steps_; }  // backend memory, one per Adam row
  StepStats* stats() const { return stats_; }          // backend memory
  // Re-plan with a given owner list (checkpoint restore on the same world
  // size): new storage, so every view moves and views_epoch() grows.
  void replan(const std::vector<int>& owners);
  // How many times the flat storage moved since finalize (dmuon_views_epoch):
  // views taken at one epoch stay valid while it lasts.
  int64_t views_epoch() const { return views_epoch_; }

  std::map<std::string, std::string> user_attributes;      // saved with checkpoints
  std::map<std::string, std::string> restored_attributes;  // read by the last restore

 private:
  void allocate_storage();
  void release_storage() noexcept;
  void build_muon_batches();
  void refresh_step_scalars();

  dmuon_context_s* ctx_;
  dmuon_options_t options_;
  Registry registry_;
  Layout layout_;
  bool finalized_ = false;
  int64_t views_epoch_ = 0;

  AdamBuffers adam_[kNumDtypes];
  MuonBuffers muon_[kNumDtypes];
  int64_t* adam_steps_ = nullptr;
  StepStats* stats_ = nullptr;

  std::vector<AdamScalarRow> adam_rows_;      // host copy, rewritten each step
  std::vector<MuonShapeBatch> muon_batches_;  // this rank's owned matrices, grouped by shape
};


}  // namespace dmuon

struct dmuon_optimizer_s {
  uint32_t magic = kOptimizerMagic;
  dmuon::Optimizer impl;
  dmuon_optimizer_s(dmuon_context_s* ctx, const dmuon_options_t& o) : impl(ctx, o) {}
};
