// collective_timeout_ms on the CUDA backend.
//
// A step only enqueues work, NCCL collectives included, so a rank that died
// mid-step is seen where the host waits for the device: a download or upload
// (clip stats, step count, checkpoints), zero/copy outside a step, a free slot
// of the scalar ring, synchronize, destroy. Without a deadline these are the
// driver's blocking waits, as before. With one they poll cudaStreamQuery /
// cudaEventQuery and ncclCommGetAsyncError until done or the deadline:
//   - an NCCL async error: DMUON_ERR_PEER_FAILED for a remote or system error
//     (a peer or its connection is gone), DMUON_ERR_CUDA for any other;
//   - a missed deadline: DMUON_ERR_TIMEOUT.
// Either way the communicator is aborted (ncclCommAbort stops this rank's
// NCCL kernels, so the streams drain), the backend is poisoned: every later
// collective and wait fails at once with that status, and nothing of it is
// freed or waited for again (~CudaBackend, release()).
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0) whatever the
// timeout, since it is made with the context and the timeout is an optimizer
// option that may change between steps (docs/decisions.md). Any NCCL call may
// then answer ncclInProgress: the work is not enqueued yet, and the
// communicator must be polled until it says ncclSuccess before the next call
// on the stream. That happens when NCCL sets up connections (the first
// collective of a kind) and at finalize; a step in steady state never meets it.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_state.hpp"
#include "backends/cuda/cuda_watchdog.hpp"
#include "core/fault_points.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {

namespace {
using Clock = std::chrono::steady_clock;

// Poll without pause while the work is likely to finish soon, then sleep
// between polls: a wait of seconds must not hold a core the rank's other
// threads (or another rank on the node) need.
void pace(Clock::time_point start) {
  if (Clock::now() - start < std::chrono::microseconds(100)) return;
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

int status_of_nccl(ncclResult_t rc) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (rc == ncclRemoteError) return DMUON_ERR_PEER_FAILED;
#endif
  return rc == ncclSystemError ? DMUON_ERR_PEER_FAILED : DMUON_ERR_CUDA;
}

std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm) {
  std::string text = ncclGetErrorString(rc);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
#else
  (void)comm;
#endif
  return text;
}

// Spins until *release is set (by the backend's abort, or at its end), or
// `give_up_ns` of the device's global timer have passed, so that a bug in the
// release cannot hold the GPU for ever.
__global__ void stall_kernel(const volatile int* release, unsigned long long give_up_ns) {
  await_prerequisite_kernels();
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*release) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < give_up_ns);
}

// Kept until the process ends, reachable from here so leak checkers stay quiet.
std::vector<std::unique_ptr<CudaStepState>>& kept_states() {
  static auto* kept = new std::vector<std::unique_ptr<CudaStepState>>;
  return *kept;
}
}  // namespace

ncclComm_t init_nccl_comm(int world, const ncclUniqueId& id, int rank) {
  ncclComm_t comm = nullptr;
#if DMUON_NCCL_NONBLOCKING
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  // The context has no deadline yet: wait as ncclCommInitRank would.
  const Clock::time_point start = Clock::now();
  while (rc == ncclInProgress && comm) {
    pace(start);
    if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
  }
  if (rc != ncclSuccess) {
    const std::string text = nccl_error_text(rc, comm);
    if (comm) ncclCommAbort(comm);
    fail(DMUON_ERR_CUDA, "ncclCommInitRankConfig: " + text);
  }
#else
  nccl_check(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
#endif
  return comm;
}

void* CudaBackend::comm_for(const char* what) const {
  check_not_failed(what);
  return nccl_;
}

void CudaBackend::abort_and_poison(int status, const std::string& message) {
  release_stall();
  std::string text = message;
  if (nccl_) {
    ncclCommAbort(static_cast<ncclComm_t>(nccl_));  // result ignored: the communicator is gone either way
    nccl_ = nullptr;
    text += "; the NCCL communicator was aborted";
  }
  poison(status, text);
}

void CudaBackend::check_nccl_async(const char* what) {
  if (!nccl_) return;
  ncclComm_t comm = static_cast<ncclComm_t>(nccl_);
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return;  // the query itself failed: the deadline decides
  if (async == ncclSuccess) return;
#if DMUON_NCCL_NONBLOCKING
  if (async == ncclInProgress) return;
#endif
  abort_and_poison(status_of_nccl(async), std::string(what) + ": NCCL reported " + nccl_error_text(async, comm));
}

void CudaBackend::nccl_issued(int result, const char* what) {
  auto rc = static_cast<ncclResult_t>(result);
#if DMUON_NCCL_NONBLOCKING
  if (rc == ncclInProgress) {
    ncclComm_t comm = static_cast<ncclComm_t>(nccl_);
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + std::chrono::milliseconds(timeout_ms_);
    while (rc == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
      if (rc != ncclInProgress) break;
      if (timeout_ms_ > 0 && Clock::now() >= deadline)
        abort_and_poison(DMUON_ERR_TIMEOUT, std::string(what) + " was not enqueued within collective_timeout_ms = " +
                                                std::to_string(timeout_ms_) +
                                                " (NCCL still connecting: a rank died, hangs, or is that late)");
      pace(start);
    }
  }
#endif
  if (rc == ncclSuccess) return;
  // The other ranks have posted theirs: this communicator cannot go on.
  abort_and_poison(status_of_nccl(rc), std::string(what) + " failed: " + nccl_error_text(rc, static_cast<ncclComm_t>(nccl_)));
}

void CudaBackend::wait_all(const char* what) {
  std::vector<void*> streams;
  streams.reserve(3 * states_.size() + 1);
  for (const CudaStepState* state : states_) {
    const CudaStepState& st = *state;
    streams.push_back(st.stream);  // the user's stream when options.cuda_stream is set
    if (st.own_stream != st.stream) streams.push_back(st.own_stream);
    streams.push_back(st.side);
  }
  streams.push_back(own_stream_);
  wait_for(what, streams, nullptr);
}

void CudaBackend::wait_for(const char* what, const std::vector<void*>& streams, void* event) {
  check_not_failed(what);
  if (timeout_ms_ <= 0) {
    for (void* s : streams) cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), what);
    if (event) cuda_check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), what);
    return;
  }
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    bool busy = false;
    auto look = [&](cudaError_t rc) {
      if (rc == cudaErrorNotReady)
        busy = true;
      else
        cuda_check(rc, what);  // a device fault: DMUON_ERR_CUDA, as without a deadline
    };
    for (void* s : streams) look(cudaStreamQuery(static_cast<cudaStream_t>(s)));
    if (event) look(cudaEventQuery(static_cast<cudaEvent_t>(event)));
    if (!busy) return;
    check_nccl_async(what);
    if (Clock::now() >= deadline)
      abort_and_poison(DMUON_ERR_TIMEOUT,
                       std::string(what) + ": the device work queued before it did not complete within "
                       "collective_timeout_ms = " + std::to_string(timeout_ms_) +
                           " (a rank died, hangs, or is that late in a collective)");
    pace(start);
  }
}

void CudaBackend::close() {
  if (failed_status()) return;  // aborted already: nothing left to finish
  wait_all("dmuon_context_destroy");
  if (!nccl_) return;
#if DMUON_NCCL_NONBLOCKING
  // Finalize flushes what NCCL still holds (its proxy work) without blocking;
  // polled like a collective, so a dead peer cannot hold the destroy.
  nccl_issued(ncclCommFinalize(static_cast<ncclComm_t>(nccl_)), "dmuon_context_destroy (ncclCommFinalize)");
#endif
  ncclComm_t comm = static_cast<ncclComm_t>(nccl_);
  nccl_ = nullptr;
  ncclCommDestroy(comm);  // local once finalized
}

void CudaBackend::inject_stall(void* stream) {
  if (!fault_armed("cuda-stall", rank_)) return;
  if (!stall_flag_)
    cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&stall_flag_), sizeof(int), cudaHostAllocMapped),
               "cudaHostAlloc (stall flag)");
  *static_cast<volatile int*>(stall_flag_) = 0;
  int* device_flag = nullptr;
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flag), stall_flag_, 0),
             "cudaHostGetDevicePointer (stall flag)");
  stall_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(device_flag, 60ull * 1000 * 1000 * 1000);
  launch_check("stall_kernel (DMUON_FAULT_POINT=cuda-stall)");
}

void CudaBackend::release_stall() noexcept {
  if (stall_flag_) *static_cast<volatile int*>(stall_flag_) = 1;
}

void CudaBackend::keep_for_process_lifetime(std::unique_ptr<CudaStepState> state) noexcept {
  if (!state) return;
  try {
    kept_states().push_back(std::move(state));
  } catch (...) {  // out of memory: not destroying it is what matters
    (void)state.release();
  }
}

}  // namespace dmuon
