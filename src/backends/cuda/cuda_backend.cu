// CUDA backend: device selection, NCCL bootstrap, memory, collectives, the
// per-optimizer state and the step brackets (eager, capture, replay).
#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_arch_check.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/cuda_graph_exec.hpp"
#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "backends/cuda/cuda_watchdog.hpp"

namespace dmuon {

namespace {
ncclDataType_t nccl_type(Dtype d) { return d == Dtype::fp32 ? ncclFloat32 : ncclBfloat16; }
ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }

void mix(uint64_t& h, uint64_t w) { h = (h ^ w) * 1099511628211ull; }
}  // namespace

// ------------------------------------------------------------ per optimizer
CudaStepState::CudaStepState() {
  cuda_check(cudaStreamCreateWithFlags(&own_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaStreamCreateWithFlags(&adam_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaStreamCreateWithFlags(&ns_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream = own_stream;
  for (cudaEvent_t& e : slot_done) cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&main_done, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&caller_ready, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&step_done, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&uploads_done, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&muon_fork, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&adam_done, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&ns_fork, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&ns_join, cudaEventDisableTiming), "cudaEventCreate");
  cublas_check(cublasCreate(&cublas), "cublasCreate");
  // A workspace of our own: cuBLAS then never allocates inside a step or a capture.
  cuda_check(cudaMalloc(&cublas_workspace, kCublasWorkspace), "cudaMalloc (cuBLAS workspace)");
  cublas_check(cublasSetWorkspace(cublas, cublas_workspace, kCublasWorkspace), "cublasSetWorkspace");
  cublas_check(cublasLtCreate(&lt), "cublasLtCreate");
  cuda_check(cudaMalloc(&sumsq_partials, sizeof(double) * kSumsqBlocks), "cudaMalloc (norm partials)");
}

CudaStepState::~CudaStepState() {
  // Destructors never throw: results are ignored, the memory goes either way.
  cudaStreamSynchronize(stream);
  cudaStreamSynchronize(side);
  cudaStreamSynchronize(adam_stream);
  cudaStreamSynchronize(ns_stream);
  for (ShapeLane& l : lanes)
    for (cudaStream_t s : {l.stream, l.ns_stream})
      if (s) cudaStreamSynchronize(s);
  drop_step_graph();
  for (ShapeWork& w : shapes) w.release();
  for (Piece& p : pieces) {
    cudaFree(p.dev);
    for (void* h : p.host) cudaFreeHost(h);
  }
  for (AdamChunk* c : chunks) cudaFree(c);
  cudaFreeHost(chunks_host);
  cudaFree(row_done);
  cudaFree(sumsq_partials);
  for (auto& kv : lt_plans) {
    LtPlan& p = kv.second;
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
  if (lt) cublasLtDestroy(lt);
  if (cublas) cublasDestroy(cublas);
  for (ShapeLane& l : lanes) l.release();  // after the handle, which may still name a lane's stream
  cudaFree(cublas_workspace);
  cudaFree(ns_workspace);
  for (cudaEvent_t e : slot_done) cudaEventDestroy(e);
  cudaEventDestroy(main_done);
  cudaEventDestroy(caller_ready);
  cudaEventDestroy(step_done);
  cudaEventDestroy(uploads_done);
  cudaEventDestroy(muon_fork);
  cudaEventDestroy(adam_done);
  cudaEventDestroy(ns_fork);
  cudaEventDestroy(ns_join);
  cudaStreamDestroy(ns_stream);
  cudaStreamDestroy(adam_stream);
  cudaStreamDestroy(side);
  cudaStreamDestroy(own_stream);
}

void CudaStepState::ShapeLane::release() noexcept {
  for (cudaStream_t s : {stream, ns_stream})
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  cudaFree(workspace);
  cudaFree(ns_workspace);
  for (cudaEvent_t e : {ns_fork, ns_join, done})
    if (e) cudaEventDestroy(e);
  *this = ShapeLane{};
}

void CudaStepState::drop_step_graph() noexcept {
  if (step_exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(step_exec));
  if (step_graph) cudaGraphDestroy(static_cast<cudaGraph_t>(step_graph));
  step_exec = step_graph = nullptr;
}

void CudaStepState::drop_shape_graphs() noexcept {
  for (ShapeWork& w : shapes) {
    if (w.exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(w.exec));
    w.exec = nullptr;
    w.warm = false;
  }
}

void ShapeWork::release() noexcept {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  exec = nullptr;
  sym.reset();
  cudaFree(X);
  cudaFree(Xn);
  cudaFree(A);
  cudaFree(B);
  cudaFree(partials);
  cudaFree(scales);
  cudaFree(arrivals);
  X = Xn = A = B = nullptr;
  partials = scales = nullptr;
  arrivals = nullptr;
}

// ------------------------------------------------------------ backend
bool cuda_device_visible() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(MPI_Comm comm, const std::string& device_spec) {
  return std::make_unique<CudaBackend>(comm, device_spec);
}

CudaBackend::CudaBackend(MPI_Comm comm, const std::string& device_spec) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
  const CudaDeviceChoice choice = choose_cuda_device(comm_, device_spec);
  device_ = choice.device;
  // "cuda" and "cuda:N" select the device for the calling thread, as a
  // simulation that leaves the choice to dmuon expects; "cuda:current" keeps
  // the simulation's. Either way each call runs on device_ (make_current).
  if (choice.make_current) cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  ScopedDevice on_device(this);
  require_kernels_for_device(device_);
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  own_stream_ = s;
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  caller_ready_ = e;

  ncclUniqueId id;
  if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  require(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm_) == MPI_SUCCESS, DMUON_ERR_MPI,
          "cuda backend: MPI_Bcast of the NCCL id failed");
  nccl_ = init_nccl_comm(world_, id, rank_);
}

CudaBackend::~CudaBackend() {
  // Frees on device_, and leaves the caller's device current afterwards.
  ScopedDevice on_device(this);
  // Destroyed without dmuon_context_destroy's close() (a failed create):
  // the same bounded wait and NCCL shutdown, its failure dropped.
  if (!failed_status() && nccl_) {
    try {
      close();
    } catch (...) {
    }
  }
  // The optimizers, which own the step states, are gone: each holds a
  // reference on the context, whose destruction ends this backend.
  if (failed_status()) {
    // Aborted NCCL kernels, or a kernel stuck behind them, may still run and
    // touch this; freeing would wait for the device. The process has lost a
    // rank: keep it until it ends (retire_step_state does so for the states).
    (void)pinned_.release();
    return;
  }
  pinned_.reset();
  if (own_stream_) cudaStreamDestroy(as_stream(own_stream_));
  if (caller_ready_) cudaEventDestroy(static_cast<cudaEvent_t>(caller_ready_));
  if (stall_flag_) cudaFreeHost(stall_flag_);
}

int CudaBackend::make_current() noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    previous = -1;
  }
  // A failure here shows in the call's first CUDA call, with its own message.
  if (previous != device_ && cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
  return previous;
}

void CudaBackend::restore_current(int token) noexcept {
  if (token >= 0 && token != device_) cudaSetDevice(token);
}

void CudaBackend::follow_caller(void* stream) {
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(caller_ready_), cudaStreamLegacy), "cudaEventRecord (caller's stream)");
  cuda_check(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(caller_ready_), 0), "cudaStreamWaitEvent");
}

StepStatePtr CudaBackend::make_step_state() {
  states_.reserve(states_.size() + 1);  // so that the push_back below cannot throw
  auto* st = new CudaStepState();
  states_.push_back(st);
  return StepStatePtr(st, StepStateDeleter{this});
}

void CudaBackend::retire_step_state(StepState* state) noexcept {
  auto* st = static_cast<CudaStepState*>(state);
  states_.erase(std::remove(states_.begin(), states_.end(), st), states_.end());
  if (current_ == st) current_ = nullptr;
  // Freeing waits for the device (cudaFree and cublasDestroy synchronise it),
  // and on a poisoned backend aborted work may still use the state.
  if (failed_status())
    keep_for_process_lifetime(std::unique_ptr<CudaStepState>(st));
  else
    delete st;
}

namespace {
CudaStepState& cuda_state(StepState* state) {
  require(state != nullptr, DMUON_ERR_INTERNAL, "cuda backend: a step without the optimizer's step state");
  return *static_cast<CudaStepState*>(state);
}
}  // namespace

void* CudaBackend::stream_handle() const { return current_ ? current_->stream : own_stream_; }
bool CudaBackend::replaying() const { return current_ && current_->mode == CudaStepState::Mode::replay; }

// ------------------------------------------------------------ memory
void* CudaBackend::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(DMUON_ERR_OUT_OF_MEMORY, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of device memory");
  }
  cuda_check(rc, "cudaMalloc");
  cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}

void CudaBackend::release(void* p) noexcept {
  if (!p) return;
  // Poisoned: the device may still run work that uses p (see ~CudaBackend).
  if (!failed_status()) cudaFree(p);
}

void CudaBackend::zero(void* p, std::size_t bytes) {
  if (!bytes || replaying()) return;
  if (current_) {
    cuda_check(cudaMemsetAsync(p, 0, bytes, current_->stream), "cudaMemsetAsync");
    return;
  }
  wait_all("zeroing device memory");
  follow_caller(own_stream_);
  cuda_check(cudaMemsetAsync(p, 0, bytes, as_stream(own_stream_)), "cudaMemsetAsync");
  wait_for("zeroing device memory", {own_stream_}, nullptr);
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (!bytes || dst == src || replaying()) return;
  if (current_) {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, current_->stream), "cudaMemcpyAsync");
    return;
  }
  wait_all("a device copy");
  follow_caller(own_stream_);
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(own_stream_)), "cudaMemcpyAsync");
  wait_for("a device copy", {own_stream_}, nullptr);
}

// ------------------------------------------------------------ host transfers
// Host transfers happen outside steps (checkpoints, tests, stats): they wait.
// Large ones (a checkpoint's buffers) go through two pinned blocks: from
// pageable memory the driver stages the copy itself, in small pieces and
// synchronously, at a fraction of the link's rate; through the blocks the
// DMA of one piece overlaps the CPU's copy of the other.
struct PinnedStaging {
  static constexpr std::size_t kBlockBytes = std::size_t{32} << 20;
  void* block[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the DMA of each block's latest piece
};

void PinnedStagingDeleter::operator()(PinnedStaging* s) const noexcept {
  for (int b = 0; b < 2; ++b) {
    if (s->block[b]) cudaFreeHost(s->block[b]);
    if (s->done[b]) cudaEventDestroy(s->done[b]);
  }
  delete s;
}

namespace {
// Below this, one plain copy: the blocks would only add a host copy.
constexpr std::size_t kPinnedFromBytes = std::size_t{1} << 20;
}  // namespace

PinnedStaging& CudaBackend::pinned_staging() {
  if (pinned_) return *pinned_;
  std::unique_ptr<PinnedStaging, PinnedStagingDeleter> s(new PinnedStaging);
  for (int b = 0; b < 2; ++b) {
    const cudaError_t rc = cudaHostAlloc(&s->block[b], PinnedStaging::kBlockBytes, cudaHostAllocDefault);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail(DMUON_ERR_OUT_OF_MEMORY, "cudaHostAlloc of the pinned staging: out of memory");
    }
    cuda_check(rc, "cudaHostAlloc (pinned staging)");
    cuda_check(cudaEventCreateWithFlags(&s->done[b], cudaEventDisableTiming), "cudaEventCreate");
  }
  pinned_ = std::move(s);
  return *pinned_;
}

void CudaBackend::upload(void* dst, const void* host, std::size_t bytes) {
  if (!bytes) return;
  const char* what = "an upload to the device";
  wait_all(what);
  follow_caller(own_stream_);
  cudaStream_t stream = as_stream(own_stream_);
  if (bytes < kPinnedFromBytes) {
    cuda_check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  } else {
    PinnedStaging& ps = pinned_staging();
    const std::size_t n = PinnedStaging::kBlockBytes;
    for (std::size_t at = 0, i = 0; at < bytes; at += n, ++i) {
      const std::size_t len = std::min(n, bytes - at), b = i % 2;
      if (i >= 2) wait_for(what, {}, ps.done[b]);  // the piece before last has left this block
      std::memcpy(ps.block[b], static_cast<const char*>(host) + at, len);
      cuda_check(cudaMemcpyAsync(static_cast<char*>(dst) + at, ps.block[b], len, cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync");
      cuda_check(cudaEventRecord(ps.done[b], stream), "cudaEventRecord");
    }
  }
  wait_for(what, {own_stream_}, nullptr);
}

void CudaBackend::download(void* host, const void* src, std::size_t bytes) {
  if (!bytes) return;
  const char* what = "a download from the device";
  wait_all(what);
  follow_caller(own_stream_);
  cudaStream_t stream = as_stream(own_stream_);
  if (bytes < kPinnedFromBytes) {
    cuda_check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    wait_for(what, {own_stream_}, nullptr);
    return;
  }
  PinnedStaging& ps = pinned_staging();
  const std::size_t n = PinnedStaging::kBlockBytes, pieces = (bytes + n - 1) / n;
  const auto enqueue = [&](std::size_t i) {
    const std::size_t at = i * n;
    cuda_check(cudaMemcpyAsync(ps.block[i % 2], static_cast<const char*>(src) + at, std::min(n, bytes - at),
                               cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync");
    cuda_check(cudaEventRecord(ps.done[i % 2], stream), "cudaEventRecord");
  };
  enqueue(0);
  for (std::size_t i = 0; i < pieces; ++i) {
    // Into the other block, whose previous piece (i - 1) was copied out below.
    if (i + 1 < pieces) enqueue(i + 1);
    wait_for(what, {}, ps.done[i % 2]);
    const std::size_t at = i * n;
    std::memcpy(static_cast<char*>(host) + at, ps.block[i % 2], std::min(n, bytes - at));
  }
}

void CudaBackend::synchronize() { wait_all("waiting for the device"); }

// ------------------------------------------------------------ collectives
// On one rank every collective is the identity; NCCL would still launch a
// copy kernel over the whole buffer (docs/decisions.md, "CUDA backend").
void CudaBackend::allreduce_gradients(void* buf, int64_t count, Dtype dtype) {
  if (!count || replaying() || world_ == 1) return;
  const char* what = "ncclAllReduce (average of gradients)";
  nccl_issued(ncclAllReduce(buf, buf, static_cast<size_t>(count), nccl_type(dtype), ncclAvg, as_comm(comm_for(what)),
                            as_stream(stream_handle())),
              what);
}

void CudaBackend::reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) {
  if (!segment || replaying() || world_ == 1) return;
  char* mine = static_cast<char*>(buf) + static_cast<std::size_t>(rank_ * segment) * dtype_size(dtype);
  const char* what = "ncclReduceScatter (Muon gradients onto their owners)";
  nccl_issued(ncclReduceScatter(buf, mine, static_cast<size_t>(segment), nccl_type(dtype), ncclAvg,
                                as_comm(comm_for(what)), as_stream(stream_handle())),
              what);
}

void CudaBackend::allgather(void* buf, int64_t segment, Dtype dtype) {
  if (!segment || replaying() || world_ == 1) return;
  char* mine = static_cast<char*>(buf) + static_cast<std::size_t>(rank_ * segment) * dtype_size(dtype);
  const char* what = "ncclAllGather (Muon parameters)";
  nccl_issued(ncclAllGather(mine, buf, static_cast<size_t>(segment), nccl_type(dtype), as_comm(comm_for(what)),
                            as_stream(stream_handle())),
              what);
}

void CudaBackend::allreduce_sum_f64(double* buf, int count) {
  if (!count || replaying() || world_ == 1) return;
  const char* what = "ncclAllReduce (gradient norm)";
  nccl_issued(ncclAllReduce(buf, buf, static_cast<size_t>(count), ncclFloat64, ncclSum, as_comm(comm_for(what)),
                            as_stream(stream_handle())),
              what);
}

// ------------------------------------------------------------ scalar ring
void* CudaBackend::stage(int piece, const void* host, std::size_t bytes, void* reader) {
  require(current_ != nullptr, DMUON_ERR_INTERNAL, "cuda backend: scalars staged outside a step");
  CudaStepState& st = *current_;
  CudaStepState::Piece& pc = st.pieces[piece];
  if (pc.bytes != bytes) {
    // Sizes are fixed by the plan, so this runs at the first step. Graphs that
    // captured the old device address are dropped with it.
    require(st.mode == CudaStepState::Mode::eager, DMUON_ERR_INTERNAL, "cuda backend: scalar table resized in a graph step");
    wait_for("resizing the scalar table", {st.stream}, nullptr);
    for (cudaEvent_t e : st.slot_done) wait_for("resizing the scalar table", {}, e);
    st.drop_step_graph();
    st.drop_shape_graphs();
    cudaFree(pc.dev);
    for (void*& h : pc.host) {
      cudaFreeHost(h);
      h = nullptr;
    }
    pc.dev = nullptr;
    pc.bytes = 0;
    pc.last_slot = -1;
    cuda_check(cudaMalloc(&pc.dev, bytes), "cudaMalloc (scalar table)");
    for (void*& h : pc.host) cuda_check(cudaHostAlloc(&h, bytes, cudaHostAllocDefault), "cudaHostAlloc (scalar ring)");
    pc.bytes = bytes;
  }
  // The device copy already holds these scalars (the usual case between two
  // setter calls): no upload, so a replayed step need not wait for one.
  if (pc.last_slot >= 0 && std::memcmp(pc.host[pc.last_slot], host, bytes) == 0) return pc.dev;
  // The slot was retired in begin_step (its event waited on), so it is free.
  std::memcpy(pc.host[st.slot], host, bytes);
  pc.last_slot = -1;
  cudaStream_t to = st.mode == CudaStepState::Mode::eager && reader ? as_stream(reader) : st.upload_stream();
  cuda_check(cudaMemcpyAsync(pc.dev, pc.host[st.slot], bytes, cudaMemcpyHostToDevice, to),
             "cudaMemcpyAsync (scalar table upload)");
  pc.last_slot = st.slot;
  st.uploaded = true;
  return pc.dev;
}

// ------------------------------------------------------------ step brackets
void CudaBackend::begin_step(StepState* state, const dmuon_options_t& o, uint64_t structure) {
  CudaStepState& st = cuda_state(state);
  st.stream = o.cuda_stream ? static_cast<cudaStream_t>(o.cuda_stream) : st.own_stream;
  current_ = nullptr;  // set last: a begin_step that throws leaves no step open
  // The options that shape the sequence of enqueued work join the structure.
  const bool norm = o.max_grad_norm > 0 || o.skip_nonfinite;
  for (uint64_t w : {uint64_t(norm), uint64_t(o.skip_nonfinite), uint64_t(o.muon_ns_steps), uint64_t(o.muon_ns_schedule),
                     uint64_t(o.muon_nesterov), uint64_t(o.cuda_graphs), uint64_t(reinterpret_cast<uintptr_t>(st.stream))})
    mix(structure, w);
  // Ring slot of this step: free once the upload that last read it retired.
  st.slot = (st.slot + 1) % CudaStepState::kSlots;
  wait_for("dmuon_step (a free slot of the scalar ring)", {}, st.slot_done[st.slot]);
  // The stream contract (dmuon.h, dmuon_step): the step follows everything the
  // caller enqueued before on its stream, the legacy default stream when it
  // gave none, and (end_step) comes before what it enqueues there after.
  // Events both ways, outside any capture: no host wait.
  st.caller = o.cuda_stream ? st.stream : cudaStreamLegacy;
  if (st.caller != st.stream) {
    cuda_check(cudaEventRecord(st.caller_ready, st.caller), "cudaEventRecord (caller's stream)");
    cuda_check(cudaStreamWaitEvent(st.stream, st.caller_ready, 0), "cudaStreamWaitEvent (caller's stream)");
  }
  inject_stall(st.stream);  // test only; before a capture begins, so never part of a graph

  st.mode = CudaStepState::Mode::eager;
  st.uploaded = false;
  st.stats_unfinished = nullptr;  // left by a step that failed before its Adam update
  st.forked = false;              // likewise
  st.step_graph_wanted = o.cuda_step_graph == 1 && !st.step_graph_disabled;
  if (!st.step_graph_wanted) {
    st.drop_step_graph();
    st.warm = false;
  } else if (st.step_exec && st.structure == structure) {
    st.mode = CudaStepState::Mode::replay;
  } else if (st.warm && st.structure == structure) {
    st.mode = CudaStepState::Mode::capture;
  } else {
    st.drop_step_graph();  // this step runs eagerly and warms up the new structure
    st.warm = false;
    st.structure = structure;
  }
  if (st.mode != CudaStepState::Mode::eager) {
    // Uploads go on the side stream, after the previous step's kernels stopped
    // reading the device tables; the graph launch waits for them in end_step.
    cuda_check(cudaEventRecord(st.main_done, st.stream), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(st.side, st.main_done, 0), "cudaStreamWaitEvent");
  }
  if (st.mode == CudaStepState::Mode::capture)
    cuda_check(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture (whole step)");
  current_ = &st;
}

namespace {
// The step's stream follows the uploads this step staged on the side stream
// (graph steps); nothing to wait for when it staged none.
void follow_uploads(const CudaStepState& st) {
  if (!st.uploaded) return;
  cuda_check(cudaEventRecord(st.uploads_done, st.side), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(st.stream, st.uploads_done, 0), "cudaStreamWaitEvent");
}

// Nodes of a graph (children included) and how many copy to the host.
void count_nodes(cudaGraph_t g, int& nodes, int& d2h) {
  for_each_node(g, [&](cudaGraphNode_t node, cudaGraphNodeType t) {
    ++nodes;
    if (t != cudaGraphNodeTypeMemcpy) return;
    cudaMemcpy3DParms p{};
    cudaGraphMemcpyNodeGetParams(node, &p);
    cudaPointerAttributes a{};
    const bool to_host = p.kind == cudaMemcpyDeviceToHost ||
                         (p.kind == cudaMemcpyDefault && cudaPointerGetAttributes(&a, p.dstPtr.ptr) == cudaSuccess &&
                          a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged);
    if (to_host) ++d2h;
  });
}
}  // namespace

void CudaBackend::end_step(StepState* state, bool ok) {
  if (!state) return;
  CudaStepState& st = *static_cast<CudaStepState*>(state);
  current_ = nullptr;
  struct ReleaseCaller {  // on every way out, the caller's later work follows the step
    CudaStepState& st;
    ~ReleaseCaller() {
      if (st.caller != st.stream && cudaEventRecord(st.step_done, st.stream) == cudaSuccess)
        cudaStreamWaitEvent(st.caller, st.step_done, 0);
    }
  } release_caller{st};
  using Mode = CudaStepState::Mode;
  if (st.mode == Mode::eager) {
    cuda_check(cudaEventRecord(st.slot_done[st.slot], st.stream), "cudaEventRecord");
    if (ok && st.step_graph_wanted) st.warm = true;
    return;
  }
  if (st.mode == Mode::capture) {
    cudaGraph_t g = nullptr;
    const cudaError_t rc = cudaStreamEndCapture(st.stream, &g);
    cudaGraphExec_t exec = nullptr;
    cudaError_t irc = rc;
    if (rc == cudaSuccess && ok) irc = instantiate_replayed_graph(&exec, g, st.stream);
    cuda_check(cudaEventRecord(st.slot_done[st.slot], st.side), "cudaEventRecord");
    if (!ok) {
      if (g) cudaGraphDestroy(g);
      // The tables staged count as on the device from now on: later work on
      // the stream must follow their upload.
      follow_uploads(st);
      return;
    }
    if (irc != cudaSuccess) {
      if (g) cudaGraphDestroy(g);
      cudaGetLastError();
      st.step_graph_disabled = true;
      st.step_note = std::string("whole-step capture failed: ") + cudaGetErrorString(irc);
      choices_log_ += st.step_note + "; this optimizer steps eagerly from now on\n";
      message(DMUON_MESSAGE_WARNING, st.step_note + "; this optimizer steps eagerly from now on");
      fail(DMUON_ERR_CUDA, st.step_note + "; this step was not applied, and the optimizer steps eagerly from now on");
    }
    st.step_graph = g;
    st.step_exec = exec;
  }
  // Launch the captured step once this step's tables are on the device.
  follow_uploads(st);
  cuda_check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(st.step_exec), st.stream), "cudaGraphLaunch (whole step)");
  cuda_check(cudaEventRecord(st.slot_done[st.slot], st.side), "cudaEventRecord");
  if (st.mode == Mode::replay) ++st.replays;
}

CudaBackend::Diagnostics CudaBackend::diagnostics(const StepState* state) const {
  Diagnostics d;
  if (!state) return d;
  const CudaStepState& st = *static_cast<const CudaStepState*>(state);
  d.stream = st.stream;
  if (st.step_graph) {
    d.step_graph = st.step_graph;
    d.step_graph_exec = st.step_exec;
    d.step_graph_memsets = memset_nodes(static_cast<cudaGraph_t>(st.step_graph));
    unsigned long long flags = 0;
    if (st.step_exec && cudaGraphExecGetFlags(static_cast<cudaGraphExec_t>(st.step_exec), &flags) == cudaSuccess)
      d.step_graph_device_launch = (flags & cudaGraphInstantiateFlagDeviceLaunch) ? 1 : 0;
    d.step_graph_nodes = 0;
    d.step_graph_d2h_copies = 0;
    count_nodes(static_cast<cudaGraph_t>(st.step_graph), d.step_graph_nodes, d.step_graph_d2h_copies);
  }
  d.step_replays = st.replays;
  d.lane_batches = st.lane_batches;
  for (const ShapeWork& w : st.shapes) {
    d.shape_graphs += w.exec ? 1 : 0;
    d.shape_fallbacks += w.fallback ? 1 : 0;
  }
  if (ns_tuner_) {
    d.ns_shapes_timed = ns_tuner_->shapes_timed;
    d.ns_cache_hits = ns_tuner_->cache_hits;
  }
  return d;
}

std::string CudaBackend::kernel_choices() const {
  // One line per Muon shape: the X·Xᵀ product and how Newton-Schulz runs.
  std::string out;
  for (const CudaStepState* st : states_)
    for (const ShapeWork& w : st->shapes)
      out += "ns " + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " " + dtype_name(w.dtype) + " x" +
             std::to_string(w.count) + ": gram=" + (w.gram_note.empty() ? std::string("cublas_gemm") : w.gram_note) + " run=" +
             (w.fallback ? "eager (capture failed: " + w.note + ")" : w.exec ? std::string("graph") : std::string("eager")) +
             "\n";
  return out + choices_log_;
}

}  // namespace dmuon
