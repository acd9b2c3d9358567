// The one boundary between the optimizer and the checkpoint code (hdf5_io).
//
// The checkpoint code sees the optimizer's state only as described here: the
// plan (the registered parameters with their placement and the buffer sizes),
// a list of state buffers (role, kind, dtype, pointer, elements), the counters
// and settings a checkpoint carries, the backend's transfers; and, for a
// restore, storage prepared for a plan, then one call that installs it and
// cannot fail. hdf5_io is compiled with an include path that holds this
// header and the few it includes, not the optimizer's (hdf5_io/CMakeLists.txt),
// so the compiler keeps it to this.
//
// A new kind of state (the fp32 master weights of bf16 parameters were one)
// is one more StateRole and one more StateBuffer from Storage::describe; the
// file format decides how it is named.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/dtype.hpp"
#include "core/lr_schedule.hpp"
#include "core/plan.hpp"

namespace dmuon {

class Optimizer;
struct PreparedState;

// master: the fp32 master weights of bf16 parameters (options.master_weights),
// indexed like the momentum (Muon) or like the parameters (Adam); only present
// where the option allocated them.
enum class StateRole { param, momentum, exp_avg, exp_avg_sq, master };

// Which elements a rank's copy of a buffer holds.
enum class Extent {
  all_ranks,    // the whole buffer (Adam, replicated; Muon parameters, all-gathered)
  own_segment,  // this rank's segment of the owner-major layout, indexed from its start
};

// One flat buffer of the state, in backend memory.
struct StateBuffer {
  StateRole role;
  Kind kind;
  Dtype dtype;  // of the parameters it belongs to; fp32 optimizer state has element_size 4
  void* data;
  int64_t elements;  // in this rank's memory
  std::size_t element_size;
  Extent extent;
};

using LrSchedules = std::array<std::optional<LrSchedule>, 2>;  // by dmuon_kind_t

// Storage prepared for a restore, owned until installed (or dropped, which
// frees it). Opaque to the checkpoint code.
struct PreparedDeleter {
  void operator()(PreparedState* p) const noexcept;
};
using PreparedPtr = std::unique_ptr<PreparedState, PreparedDeleter>;

struct RestoreTarget {
  Plan plan;
  std::vector<StateBuffer> buffers;  // where the restored contents go
  int64_t* adam_steps = nullptr;     // backend memory, plan.layout.num_adam_rows
  bool moved = false;                // new storage: views taken before move
  PreparedPtr prepared;
};

// Everything a restore installs besides the buffers' contents.
struct RestoredSettings {
  dmuon_options_t options{};  // validated
  bool has_lr_schedules = false;
  LrSchedules lr_schedules;
  std::map<std::string, std::string> attributes;  // dmuon_checkpoint_get_attribute's answers
};

// The optimizer as the checkpoint code uses it (core/state.cpp).
class StateAccess {
 public:
  explicit StateAccess(Optimizer& opt) : opt_(opt) {}

  MPI_Comm comm() const;
  int rank() const;
  int world() const;
  const std::vector<ParamRecord>& params() const;  // placed by the current plan
  const Layout& layout() const;
  uint64_t model_hash() const;
  std::vector<StateBuffer> buffers() const;
  int64_t* adam_steps() const;  // backend memory, one per Adam row
  int64_t optimizer_step() const;
  const dmuon_options_t& options() const;
  const LrSchedules& lr_schedules() const;
  const std::map<std::string, std::string>& user_attributes() const;
  std::string kernel_choices() const;
  bool host_memory() const;  // buffers can be handed to file I/O directly

  // The backend's transfers between its memory and the host.
  void download(void* host, const void* src, std::size_t bytes) const;
  void upload(void* dst, const void* host, std::size_t bytes) const;
  void zero(void* dst, std::size_t bytes) const;
  bool move_pages_into(void* dst, void* staged, std::size_t bytes) const noexcept;
  void message(int level, const std::string& text) const;

  // Restore, first step: storage for `plan`. The current storage when the
  // plan is the current one (views stay valid), else new storage (throws
  // when short of memory; the optimizer is unchanged either way).
  RestoreTarget prepare(Plan plan);
  // Second step, after the contents are placed: set the optimizer step
  // counter that `target` will carry (the other step statistics carry over).
  void place_step_count(const RestoreTarget& target, int64_t optimizer_step);
  // Last step: the optimizer takes the plan, the storage and the settings.
  void install(RestoreTarget&& target, RestoredSettings&& settings) noexcept;
  // After an install whose target.moved: tells the user that views moved.
  void tell_storage_moved() const;

 private:
  Optimizer& opt_;
};

}  // namespace dmuon
