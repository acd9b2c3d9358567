// The CUDA backend: flat buffers in device memory, NCCL collectives
// bootstrapped through MPI, fused kernels, cuBLAS Newton-Schulz replayed from
// CUDA graphs, and an optional whole-step graph. Every call of the step only
// enqueues work on the optimizer's stream: no host synchronisation, no
// device-to-host copy (tests/gpu/test_cuda_async.cpp holds that to account).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace dmuon {

struct CudaStepState;  // per optimizer: stream, scalar ring, workspaces, graphs
class NsTuner;         // per-shape choice of the Newton-Schulz products (cuda_ns_tune.hpp)
struct NsTunerDeleter {
  void operator()(NsTuner* t) const noexcept;
};
struct PinnedStaging;  // pinned blocks of the host transfers (cuda_backend.cu)
struct PinnedStagingDeleter {
  void operator()(PinnedStaging* s) const noexcept;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(MPI_Comm comm, const std::string& device_spec);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  const char* name() const override { return "cuda"; }

  void* allocate(std::size_t bytes) override;
  void release(void* p) noexcept override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void upload(void* dst, const void* host, std::size_t bytes) override;
  void download(void* host, const void* src, std::size_t bytes) override;
  void synchronize() override;

  void allreduce_gradients(void* buf, int64_t count, Dtype dtype) override;
  void reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) override;
  void allgather(void* buf, int64_t segment, Dtype dtype) override;
  void allreduce_sum_f64(double* buf, int count) override;
  void set_collective_timeout(int milliseconds) override { timeout_ms_ = milliseconds; }
  void close() override;

  void accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, double scale,
                        StepStats* stats) override;
  void finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed,
                    bool adam_follows) override;
  void adam_update(const AdamBuffers (&buffers)[kNumDtypes], const float (&grad_scale)[kNumDtypes],
                   const AdamScalarRow* rows, int num_rows,
                   int64_t* steps, const StepStats* stats) override;
  void muon_update(const MuonBuffers (&buffers)[kNumDtypes], const std::vector<MuonShapeBatch>& batches,
                   const MuonHyper& hyper, const StepStats* stats) override;

  StepStatePtr make_step_state() override;
  void retire_step_state(StepState* state) noexcept override;
  void begin_step(StepState* state, const dmuon_options_t& options, uint64_t structure) override;
  void end_step(StepState* state, bool ok) override;
  std::string kernel_choices() const override;
  int make_current() noexcept override;
  void restore_current(int token) noexcept override;

  // What the tests look at (tests/gpu/): the optimizer's stream, and its
  // whole-step graph (nodes, device-to-host copy nodes, replays; -1 when none).
  struct Diagnostics {
    void* stream = nullptr;
    int step_graph_nodes = -1;
    int step_graph_d2h_copies = -1;
    int step_graph_memsets = -1;
    int step_graph_device_launch = -1;  // 1: instantiated for device launch, 0: plainly (-1: no graph)
    void* step_graph = nullptr;       // the captured cudaGraph_t and its cudaGraphExec_t, for benches
    void* step_graph_exec = nullptr;  // that take it apart; owned by the step state
    long step_replays = 0;
    int shape_graphs = 0;     // per-shape Newton-Schulz graphs instantiated
    int shape_fallbacks = 0;  // shapes that fell back to eager after a failed capture
    int ns_shapes_timed = 0;  // Newton-Schulz shapes this backend timed (symmetric products)
    int ns_cache_hits = 0;    // and those whose choice came from the cache file
    long lane_batches = 0;    // shape batches enqueued on a lane beside the step's stream
  };
  Diagnostics diagnostics(const StepState* state) const;
  // Make the next per-shape capture fail, to exercise the eager fallback.
  void fail_next_shape_capture_for_testing() { fail_next_capture_ = true; }

  int device() const { return device_; }
  // Chooses each shape's Newton-Schulz products (cuda_ns_tune.cu); made at first use.
  NsTuner& ns_tuner();

 private:
  friend struct CudaStepState;
  void* stream_handle() const;     // the current optimizer's stream, else the backend's own
  bool replaying() const;          // the step's work is in a graph: calls only stage scalars
  // Host waits, bounded by the collective timeout (cuda_watchdog.cu). A wait
  // that fails aborts the NCCL communicator and poisons the backend.
  void wait_all(const char* what);  // every optimizer's streams and our own (outside steps only)
  void wait_for(const char* what, const std::vector<void*>& streams, void* event);
  void check_nccl_async(const char* what);
  // The result of an NCCL call (ncclResult_t): waits out ncclInProgress of the
  // non-blocking communicator, and a failure poisons (the peers went ahead).
  void nccl_issued(int result, const char* what);
  void* comm_for(const char* what) const;  // the communicator, or the poisoning status thrown
  [[noreturn]] void abort_and_poison(int status, const std::string& message);
  // Test-only fault point "cuda-stall" (DMUON_FAULT_POINT, cuda_watchdog.cu):
  // the step's stream waits on a host flag that only an abort releases.
  void inject_stall(void* stream);
  void release_stall() noexcept;
  // Work that a poisoned backend cannot wait for may still use these: keep them.
  void keep_for_process_lifetime(std::unique_ptr<CudaStepState> state) noexcept;
  // Copies `bytes` of host data into the step's pinned ring slot for `piece`
  // and enqueues its upload; returns the device copy (a fixed address). An
  // eager step uploads on the stream of the work that reads it: the step's
  // stream, or `reader` (a cudaStream_t) when given.
  void* stage(int piece, const void* host, std::size_t bytes, void* reader = nullptr);
  PinnedStaging& pinned_staging();  // made at the first large host transfer
  // Work enqueued on `stream` from now on follows what the calling thread
  // enqueued before on the legacy default stream (host transfers outside steps).
  void follow_caller(void* stream);

  MPI_Comm comm_;
  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  void* nccl_ = nullptr;            // ncclComm_t
  void* own_stream_ = nullptr;      // cudaStream_t for calls outside any step
  void* caller_ready_ = nullptr;    // cudaEvent_t of follow_caller
  // The optimizers' states (they own them; make_step_state and
  // retire_step_state keep this list): the waits outside steps and
  // kernel_choices() cover all of them.
  std::vector<CudaStepState*> states_;
  CudaStepState* current_ = nullptr;  // the state of the step between begin_step and end_step
  // Launches the statistics finish that finish_stats left to the Adam kernel.
  void finish_unfinished_stats(CudaStepState& st);
  // adam_update's work on `launch` (a cudaStream_t): the step's stream, or the
  // Adam stream forked from it.
  void adam_enqueue(CudaStepState& st, void* launch, const AdamBuffers (&buffers)[kNumDtypes],
                    const float (&grad_scale)[kNumDtypes], const AdamScalarRow* rows, int num_rows, int64_t* steps,
                    const StepStats* stats);
  bool fail_next_capture_ = false;
  std::string choices_log_;         // shape choices and fallbacks, for kernel_choices()
  std::unique_ptr<NsTuner, NsTunerDeleter> ns_tuner_;
  std::unique_ptr<PinnedStaging, PinnedStagingDeleter> pinned_;
  int timeout_ms_ = 0;              // bounds each host wait; 0: the driver's blocking waits
  int* stall_flag_ = nullptr;       // host-mapped flag of the test-only stall (see inject_stall)

  // Muon helpers (cuda_muon.cu).
  void run_shape(CudaStepState& st, const MuonBuffers& buf, const MuonShapeBatch& batch, std::size_t index,
                 const MuonHyper& hyper, const StepStats* stats, const void* dev_mats, const void* dev_header);
};

}  // namespace dmuon
