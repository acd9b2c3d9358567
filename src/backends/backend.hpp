// What a backend provides: memory, collectives and the step's kernels. The
// algorithm (what happens in a step, in which order) lives once in
// core/optimizer.cpp; a backend holds only what differs between host and
// device. Every call is stream-ordered on the backend's queue (immediate on
// the CPU) and none waits for the device except download() and synchronize().
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/scalar_table.hpp"
#include "core/step_stats.hpp"

namespace dmuon {

// Adam flat storage of one dtype (backend memory). master: null, or the fp32
// master weights of every element, replicated like the parameters (see
// master_or_param in core/dtype.hpp).
struct AdamBuffers {
  void* param = nullptr;
  void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* master = nullptr;
  int64_t elements = 0;
};

// Muon flat storage of one dtype (backend memory): param and grad are the full
// owner-major buffers; momentum and master (null without master weights) hold
// only this rank's segment.
struct MuonBuffers {
  void* param = nullptr;
  void* grad = nullptr;
  float* momentum = nullptr;
  float* master = nullptr;
  int64_t segment_elements = 0;
};

// One owned matrix of a batch. Offsets index the flat param/grad buffer; the
// momentum offset indexes this rank's momentum (and master) segment.
struct MuonMatrix {
  int64_t offset;
  int64_t momentum_offset;
  int param_id;
  float lr;            // group lr * lr_mul * shape scale (the update's step size)
  float decay;         // 1 - group lr * lr_mul * weight decay * wd_mul
  int active;          // 0: no gradient this step, skipped whole
};

// Owned matrices of one (dtype, rows, cols): Newton-Schulz runs batched over them.
struct MuonShapeBatch {
  Dtype dtype;
  int64_t rows;
  int64_t cols;
  std::vector<MuonMatrix> matrices;
};

struct MuonHyper {
  float momentum;
  int nesterov;
  int ns_steps;
  int ns_schedule;  // dmuon_ns_schedule_t
  float ns_eps;
  int cuda_graphs;
  int ns_symmetric;  // options.muon_ns_symmetric: DMUON_NS_SYMMETRIC_AUTO (timed), _OFF, _GRAM, or 2/4/8 blocks
};

class Backend;

// What a backend keeps for one optimizer between steps (the CUDA backend: its
// stream, scalar ring, workspaces and captured graphs). The backend makes it,
// the optimizer owns it, and it goes with the optimizer's storage, whose
// addresses its graphs hold. The CPU backend keeps none.
class StepState {
 public:
  virtual ~StepState() = default;
};
// Gives a state back to the backend that made it (Backend::retire_step_state).
struct StepStateDeleter {
  Backend* backend = nullptr;
  void operator()(StepState* s) const noexcept;
};
using StepStatePtr = std::unique_ptr<StepState, StepStateDeleter>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory in the backend's space. allocate() returns zero-filled memory.
  virtual void* allocate(std::size_t bytes) = 0;
  // Replaces the contents of `dst`, a block of `bytes` from allocate(), with
  // those of `staged`, a block of the same length from map_anonymous
  // (core/mapped_memory.hpp), by moving its pages instead of copying them:
  // dst keeps its address, so the views into it stay valid, and `staged` is
  // consumed. A restore places its staging this way (hdf5_io/reader.cpp).
  // False: nothing changed (not a host backend, or dst is not a mapped block
  // of that length); the caller copies instead.
  virtual bool move_pages_into(void* /*dst*/, void* /*staged*/, std::size_t /*bytes*/) noexcept { return false; }
  virtual void release(void* p) noexcept = 0;
  virtual void zero(void* p, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Host -> backend; the host buffer may be reused as soon as this returns.
  virtual void upload(void* dst, const void* host, std::size_t bytes) = 0;
  // Backend -> host; waits for the work queued before it.
  virtual void download(void* host, const void* src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Collectives over the context's communicator, in place.
  // The gradient all-reduce leaves the average over the ranks, or their sum
  // where allreduce_leaves_sum(dtype): the step then passes 1/ranks to the
  // norm and the Adam update of that dtype (adam_grad_scale), which apply it
  // where they read the gradient anyway, instead of a pass over the buffer.
  virtual bool allreduce_leaves_sum(Dtype dtype) const { return (void)dtype, false; }
  virtual void allreduce_gradients(void* buf, int64_t count, Dtype dtype) = 0;
  // buf holds world segments of `segment` elements; rank r's segment receives the average.
  virtual void reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) = 0;
  // rank r's segment is sent to every rank.
  virtual void allgather(void* buf, int64_t segment, Dtype dtype) = 0;
  virtual void allreduce_sum_f64(double* buf, int count) = 0;

  // The step's kernels.
  // Adds the squares of scale * x over the range (scale: adam_grad_scale, or 1).
  virtual void accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, double scale,
                                StepStats* stats) = 0;
  // adam_follows: this step calls adam_update after it. A backend may then
  // leave a step without a norm (nothing to wait for) to that update, which
  // derives the factor from grad_accumulation and writes the statistics
  // itself, saving a launch; its muon_update must not read them before.
  virtual void finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed,
                            bool adam_follows) = 0;
  // rows: host array of the scalar table; steps: backend array, one count per
  // row; grad_scale: per dtype, the factor that turns the gradient buffer into
  // the average (see allreduce_leaves_sum), applied with the clip factor.
  virtual void adam_update(const AdamBuffers (&buffers)[kNumDtypes], const float (&grad_scale)[kNumDtypes],
                           const AdamScalarRow* rows, int num_rows, int64_t* steps, const StepStats* stats) = 0;
  virtual void muon_update(const MuonBuffers (&buffers)[kNumDtypes], const std::vector<MuonShapeBatch>& batches,
                           const MuonHyper& hyper, const StepStats* stats) = 0;

  // A new per-optimizer state; null where the backend keeps none.
  virtual StepStatePtr make_step_state() { return StepStatePtr(nullptr, StepStateDeleter{this}); }
  // Where a StepStatePtr ends. A backend whose device may still run work that
  // uses the state (a poisoned CUDA backend) keeps it instead of freeing it.
  virtual void retire_step_state(StepState* state) noexcept { delete state; }

  // Brackets of one optimizer step, called by Optimizer::step() with the
  // optimizer's state (from make_step_state; null for a backend that keeps
  // none): the calls in between are that optimizer's step. `structure`
  // hashes what changes the step's sequence of calls (no-grad marks,
  // external gradient pointers). A backend may capture the calls in between
  // and replay them (the CUDA whole-step graph), which is why the step is a
  // bracket rather than a state argument to each call; end_step(state, false)
  // closes a step that threw. Defaults do nothing (the CPU backend).
  virtual void begin_step(StepState* state, const dmuon_options_t& options, uint64_t structure) {
    (void)state, (void)options, (void)structure;
  }
  virtual void end_step(StepState* state, bool ok) { (void)state, (void)ok; }

  // Deadline for each collective above, in ms (0: wait forever); the
  // optimizer sets it from options.collective_timeout_ms before each step, as
  // optimizers sharing a backend may differ. A collective that misses it
  // throws DMUON_ERR_TIMEOUT (DMUON_ERR_PEER_FAILED when the transport reports
  // a dead rank), and from then on every collective of this backend fails at
  // once with that status: the communicator holds an abandoned operation.
  // CPU: MPI non-blocking collectives and a test loop; CUDA: the collectives
  // are enqueued, so the deadline bounds each host wait (download,
  // synchronize, ...), polled with NCCL's async error query, and a failure
  // aborts the NCCL communicator. The default ignores it (blocking collectives).
  virtual void set_collective_timeout(int milliseconds) { (void)milliseconds; }

  // Called by dmuon_context_destroy before the destructor: finishes what needs
  // the transport (CUDA: waits for the streams and finalizes the NCCL
  // communicator, both bounded by the deadline) and throws a failure found
  // there, which poisons as above. The destructor then frees local resources
  // only, and never waits on a poisoned backend.
  virtual void close() {}

  // The status that poisoned this backend, 0 while it is healthy.
  int failed_status() const { return failed_status_; }
  // Throws that failure for `what`, a call that would communicate or wait on
  // the abandoned operation, so that it fails at once instead of hanging.
  void check_not_failed(const char* what) const {
    if (failed_status_)
      fail(failed_status_, std::string(what) + " not attempted: an earlier collective on this context failed (" +
                               failed_message_ + "); destroy the optimizer and the context");
  }

  // The context's message callback (dmuon_context_set_message_callback):
  // the one place the library's messages go, from the core, the checkpoint
  // code and the backends alike. Without a callback a message costs nothing.
  using MessageSink = void (*)(int level, const char* text, void* user);
  void set_message_sink(MessageSink sink, void* user) {
    sink_ = sink;
    sink_user_ = user;
  }
  void message(int level, const std::string& text) const {
    if (sink_) sink_(level, text.c_str(), sink_user_);
  }

  // Per-shape kernel choices the backend made (for example the symmetric
  // product of Newton-Schulz), as text that checkpoints store beside the plan.
  virtual std::string kernel_choices() const { return ""; }

  // The calling thread's current device belongs to the simulation. A device
  // backend makes its own device current for the duration of one public call
  // and gives the previous one back afterwards (ScopedDevice in
  // core/api_guard.hpp); the token is what make_current() returned.
  virtual int make_current() noexcept { return -1; }
  virtual void restore_current(int token) noexcept { (void)token; }

 protected:
  // Records the failure (the first one stays) and throws it.
  [[noreturn]] void poison(int status, const std::string& message) {
    if (!failed_status_) {
      failed_status_ = status;
      failed_message_ = message;
    }
    fail(status, message);
  }

 private:
  int failed_status_ = 0;
  std::string failed_message_;
  MessageSink sink_ = nullptr;
  void* sink_user_ = nullptr;
};

inline void StepStateDeleter::operator()(StepState* s) const noexcept {
  if (s) backend->retire_step_state(s);
}

// Makes the backend's device current for a scope (one public call) and gives
// the caller's back at its end.
class ScopedDevice {
 public:
  explicit ScopedDevice(Backend* b) : b_(b), token_(b ? b->make_current() : -1) {}
  ~ScopedDevice() {
    if (b_) b_->restore_current(token_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  Backend* b_;
  int token_;
};

// Backend selection by resource string ("cpu", "cuda", "cuda:current",
// "cuda:N", "auto"); throws Error.
std::unique_ptr<Backend> make_backend(const std::string& resource, MPI_Comm comm);

// Provided by backends/cuda when compiled, by a stub that answers
// DMUON_ERR_BACKEND_NOT_COMPILED otherwise. `device_spec` is what follows
// "cuda" in the resource string: "" (one device per rank of the node),
// ":current" (the calling thread's current device) or ":N" (device N).
std::unique_ptr<Backend> make_cuda_backend(MPI_Comm comm, const std::string& device_spec);
bool cuda_device_visible();
std::unique_ptr<Backend> make_cpu_backend(MPI_Comm comm);

}  // namespace dmuon
