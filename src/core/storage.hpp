// The optimizer's flat storage under one plan, in backend memory: the Adam
// and Muon buffers of every dtype, the Adam step counters and the step
// statistics. The constructor allocates all of it or, when an allocation
// fails, frees what it got and throws; the destructor releases it. So a new
// plan's storage can be built beside the current one and swapped in without
// a failure path (Optimizer::replan, a restore's install).
#pragma once
#include <vector>

#include "backends/backend.hpp"
#include "core/plan.hpp"
#include "core/state.hpp"

namespace dmuon {

class Storage {
 public:
  Storage() = default;  // holds nothing
  // masters: fp32 master weights of the bf16 parameters (options.master_weights),
  // zero-filled, so that the first step reads them from the parameters.
  Storage(Backend& backend, const Layout& layout, bool masters);
  ~Storage() { release(); }
  Storage(Storage&& other) noexcept { swap(other); }
  Storage& operator=(Storage&& other) noexcept {
    Storage(std::move(other)).swap(*this);
    return *this;
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void swap(Storage& other) noexcept;

  // The state buffers (not the gradients) as the checkpoint code sees them.
  std::vector<StateBuffer> describe(const Layout& layout) const;

  AdamBuffers adam[kNumDtypes];
  MuonBuffers muon[kNumDtypes];
  int64_t* adam_steps = nullptr;  // one per Adam row (at least one slot)
  StepStats* stats = nullptr;

 private:
  void release() noexcept;
  Backend* backend_ = nullptr;
};

// What a plan needs before it can be adopted without a failure path: its
// storage (none when the plan is the optimizer's current one) and this
// rank's Newton-Schulz batches.
// Where an Adam row's per-step scalars come from: its parameter (for the
// gradient marks) and the multipliers of the group's learning rate and decay.
struct AdamRowSource {
  int param_id;
  double lr_mul;
  double wd_mul;
};

struct PreparedState {
  bool fresh = false;  // false: the current storage stays
  Storage storage;
  std::vector<MuonShapeBatch> muon_batches;
  std::vector<AdamScalarRow> adam_rows;     // placement filled in; the scalars are written by the step
  std::vector<AdamRowSource> adam_sources;  // indexed like adam_rows
};

// This rank's owned matrices grouped by (dtype, rows, cols), in registration
// order inside each group, so Newton-Schulz runs batched over a group.
std::vector<MuonShapeBatch> muon_batches_for(const Plan& plan, int rank);

}  // namespace dmuon
