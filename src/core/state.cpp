// The optimizer's side of the checkpoint boundary (core/state.hpp).
#include "core/state.hpp"

#include <cstring>
#include <utility>

#include "core/optimizer.hpp"

namespace dmuon {

void PreparedDeleter::operator()(PreparedState* p) const noexcept { delete p; }

MPI_Comm StateAccess::comm() const { return opt_.context()->comm; }
int StateAccess::rank() const { return opt_.context()->rank; }
int StateAccess::world() const { return opt_.context()->size; }
const std::vector<ParamRecord>& StateAccess::params() const { return opt_.registry().all(); }
const Layout& StateAccess::layout() const { return opt_.layout(); }
uint64_t StateAccess::model_hash() const { return opt_.registry().model_hash(); }
std::vector<StateBuffer> StateAccess::buffers() const { return opt_.storage_.describe(opt_.layout()); }
int64_t* StateAccess::adam_steps() const { return opt_.storage_.adam_steps; }
int64_t StateAccess::optimizer_step() const { return opt_.step_count(); }
const dmuon_options_t& StateAccess::options() const { return opt_.options(); }
const LrSchedules& StateAccess::lr_schedules() const { return opt_.lr_schedules(); }
const std::map<std::string, std::string>& StateAccess::user_attributes() const { return opt_.user_attributes; }
std::string StateAccess::kernel_choices() const { return opt_.backend().kernel_choices(); }
bool StateAccess::host_memory() const { return std::strcmp(opt_.backend().name(), "cpu") == 0; }

void StateAccess::download(void* host, const void* src, std::size_t bytes) const {
  opt_.backend().download(host, src, bytes);
}
void StateAccess::upload(void* dst, const void* host, std::size_t bytes) const {
  opt_.backend().upload(dst, host, bytes);
}
void StateAccess::zero(void* dst, std::size_t bytes) const { opt_.backend().zero(dst, bytes); }
bool StateAccess::move_pages_into(void* dst, void* staged, std::size_t bytes) const noexcept {
  return opt_.backend().move_pages_into(dst, staged, bytes);
}
void StateAccess::message(int level, const std::string& text) const { opt_.backend().message(level, text); }

RestoreTarget StateAccess::prepare(Plan plan) {
  RestoreTarget t;
  const bool fresh = plan.owners() != muon_owners(opt_.registry().all());
  t.prepared = PreparedPtr(new PreparedState(opt_.prepare(plan, fresh)));
  const Storage& storage = fresh ? t.prepared->storage : opt_.storage_;
  t.buffers = storage.describe(plan.layout);
  t.adam_steps = storage.adam_steps;
  t.moved = fresh;
  t.plan = std::move(plan);
  return t;
}

void StateAccess::place_step_count(const RestoreTarget& target, int64_t optimizer_step) {
  StepStats* to = target.moved ? target.prepared->storage.stats : opt_.storage_.stats;
  StepStats stats;
  opt_.backend().download(&stats, to, sizeof stats);
  stats.steps_taken = optimizer_step;
  opt_.backend().upload(to, &stats, sizeof stats);
}

void StateAccess::install(RestoreTarget&& target, RestoredSettings&& settings) noexcept {
  opt_.adopt(std::move(target.plan), std::move(*target.prepared));
  target.prepared.reset();  // the old storage, when the plan moved
  opt_.options_ = settings.options;
  if (settings.has_lr_schedules) opt_.lr_schedules_ = settings.lr_schedules;
  opt_.restored_attributes.swap(settings.attributes);
}

void StateAccess::tell_storage_moved() const { opt_.tell_storage_moved(); }

}  // namespace dmuon
