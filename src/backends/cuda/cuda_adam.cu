// CUDA kernels of the replicated part of the step: the gradient sum of
// squares (deterministic two-pass reduction, so a replayed step equals an
// eager one bit for bit), the clip/guard statistics, and the fused AdamW pass
// reading the scalar table with 16-byte accesses.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_state.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {

namespace {

// Element access in groups of V = 4 (16 bytes of fp32, 8 of bf16): the gradient
// norm's loads, and the Adam pass's before the shared element function of
// scalar_table.hpp on each.

template <class T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int V = 4;
  __device__ static void load(const float* p, float* out) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    out[0] = x.x, out[1] = x.y, out[2] = x.z, out[3] = x.w;
  }
  __device__ static void store(float* p, const float* in) { *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]); }
};
template <>
struct Vec<uint16_t> {
  // Four, not eight: a thread's work per vector then equals fp32's (four
  // elements), which ran the tiny-tensor set faster at the same bandwidth on
  // large rows (docs/decisions.md, "Adam over many tiny tensors").
  static constexpr int V = 4;
  __device__ static void load(const uint16_t* p, float* out) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    const uint32_t w[2] = {x.x, x.y};
    for (int k = 0; k < 2; ++k) {
      out[2 * k] = bf16_to_float(static_cast<uint16_t>(w[k] & 0xffffu));
      out[2 * k + 1] = bf16_to_float(static_cast<uint16_t>(w[k] >> 16));
    }
  }
  __device__ static void store(uint16_t* p, const float* in) {
    uint32_t w[2];
    for (int k = 0; k < 2; ++k) w[k] = uint32_t(float_to_bf16(in[2 * k])) | (uint32_t(float_to_bf16(in[2 * k + 1])) << 16);
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  }
};
// The fp32 moments (and master weights) are read in vectors of the
// parameter's width.
static_assert(Vec<uint16_t>::V == Vec<float>::V, "one vector width for every dtype");

// Per block, the sum of squares of its share of g. A fixed grid walks g in
// vectors of Vec<T>, kSumsqUnroll of them in flight per thread: at two blocks
// per multiprocessor, one scalar load per thread would keep too few bytes in
// flight to approach the memory's bandwidth. The flat buffers' segments start
// aligned (kAlignElements); an unaligned g is read element by element. The
// share of each thread depends only on n and g's alignment, so the sum has the
// same bits on every run.
constexpr int kSumsqUnroll = 4;
template <class T>
__global__ void sumsq_partial(const T* g, int64_t n, double* partials) {
  await_prerequisite_kernels();
  constexpr int V = Vec<T>::V;
  const int64_t tid = blockIdx.x * int64_t(kThreads) + threadIdx.x, threads = int64_t(gridDim.x) * kThreads;
  double acc = 0.0;
  int64_t scalar_from = 0;  // elements from here on are read one by one
  if (reinterpret_cast<uintptr_t>(g) % (V * sizeof(T)) == 0) {
    const int64_t vectors = n / V;
    int64_t v = tid;
    for (; v + (kSumsqUnroll - 1) * threads < vectors; v += kSumsqUnroll * threads) {
      float x[kSumsqUnroll][V];
      for (int u = 0; u < kSumsqUnroll; ++u) Vec<T>::load(g + (v + u * threads) * V, x[u]);
      for (int u = 0; u < kSumsqUnroll; ++u)
        for (int k = 0; k < V; ++k) acc += double(x[u][k]) * x[u][k];
    }
    for (; v < vectors; v += threads) {
      float x[V];
      Vec<T>::load(g + v * V, x);
      for (int k = 0; k < V; ++k) acc += double(x[k]) * x[k];
    }
    scalar_from = vectors * V;
  }
  for (int64_t i = scalar_from + tid; i < n; i += threads) {
    const double x = load_f32(g, i);
    acc += x * x;
  }
  const double s = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sumsq_finish(const double* partials, int n, double weight, double* sumsq) {
  await_prerequisite_kernels();
  double acc = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) acc += partials[i];
  const double s = block_sum(acc);
  if (threadIdx.x == 0) *sumsq += s * weight;
}

__global__ void finish_stats_kernel(StepStats* s, const StepHeader* h, int skip_nonfinite, int norm_computed) {
  await_prerequisite_kernels();
  finish_step_stats(*s, norm_computed ? h->max_norm : 0.0, skip_nonfinite, norm_computed);
}

// Master weights (bf16 only; `master` null otherwise): the update starts
// from the master, or from the parameter the program wrote (master_or_param),
// and stores both the master and its rounding.
// The vector path widens the parameter first: its rounding gives back the
// stored bits (a NaN's payload aside), so the comparison is master_or_param's.
template <int V>
__device__ inline void start_from_master(float (&p)[V], const float* master) {
  float w[V];
  Vec<float>::load(master, w);
  for (int k = 0; k < V; ++k) p[k] = master_or_param(w[k], float_to_bf16(p[k]));
}
template <class T>
__device__ inline float load_start(const T* param, const float* master, int64_t j) {
  if constexpr (std::is_same<T, uint16_t>::value)
    if (master) return master_or_param(master[j], param[j]);
  return load_f32(param, j);
}
template <class T>
__device__ inline void store_result(T* param, float* master, int64_t j, float w) {
  if (master) master[j] = w;
  store_f32(param, j, w);
}

// One block per chunk of one row. The guard (skip) and the row's active flag
// are read on the device: no host branch depends on the step's outcome. The
// row's scalars are derived once per block; each thread keeps kUnroll vectors
// of loads in flight to cover memory latency.
template <class T, int kUnroll>
__global__ void __launch_bounds__(kThreads) adam_kernel(T* __restrict__ param, const T* __restrict__ grad,
                                                       float* __restrict__ m, float* __restrict__ v,
                                                       float* __restrict__ master,
                                                       const AdamChunk* __restrict__ chunks,
                                                       const AdamScalarRow* __restrict__ rows,
                                                       int64_t* __restrict__ steps, int* __restrict__ row_done,
                                                       const StepStats* stats, StepStats* finish, int derive,
                                                       float grad_scale) {
  await_prerequisite_kernels();
  constexpr int V = Vec<T>::V;
  __shared__ AdamScalarRow r;
  __shared__ AdamDerived d;
  __shared__ float clip;
  __shared__ int live;
  const AdamChunk c = chunks[blockIdx.x];
  if (threadIdx.x == 0) {
    r = rows[c.row];
    // derive: a step without a norm, whose statistics are not finished yet
    // (finish_stats' adam_follows). Its factor is 1/micro-batches and it is
    // never skipped: both come from what finishing does not write, so block 0
    // of one launch (finish non-null) may finish them while the others run.
    live = (derive || !stats->skip) && r.active;
    if (live) d = adam_derive(r, steps[c.row] + 1);
    clip = static_cast<float>(derive ? accumulation_scale(*stats) : stats->clip_coef) * grad_scale;
    if (finish && blockIdx.x == 0) finish_step_stats(*finish, 0.0, 0, 0);
  }
  __syncthreads();
  if (!live) return;
  const int64_t end = c.start + c.count;
  for (int64_t base = c.start + int64_t(threadIdx.x) * V; base < end; base += int64_t(kThreads) * V * kUnroll) {
    float p[kUnroll][V], g[kUnroll][V], mm[kUnroll][V], vv[kUnroll][V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads * V;
      if (i + V <= end) {
        Vec<T>::load(param + i, p[u]);
        if (master) start_from_master(p[u], master + i);
        Vec<T>::load(grad + i, g[u]);
        Vec<float>::load(m + i, mm[u]);
        Vec<float>::load(v + i, vv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kThreads * V;
      if (i + V <= end) {
#pragma unroll
        for (int k = 0; k < V; ++k) p[u][k] = adam_element(p[u][k], g[u][k] * clip, mm[u][k], vv[u][k], r, d);
        if (master) Vec<float>::store(master + i, p[u]);
        Vec<T>::store(param + i, p[u]);
        Vec<float>::store(m + i, mm[u]);
        Vec<float>::store(v + i, vv[u]);
      }
    }
  }
  // The row's ragged end (fewer than V elements): one element per thread,
  // rather than one thread waiting for each element's loads in turn.
  const int64_t j = c.start + c.count / V * V + threadIdx.x;
  if (j < end)
    store_result(param, master, j, adam_element(load_start(param, master, j), load_f32(grad, j) * clip, m[j], v[j], r, d));
  // The row's step count advances once, after every chunk of the row has read
  // it: by the row's last block to finish (a separate kernel would be one more
  // graph node, which costs more than the pass itself for tiny tensors). Every
  // other block of the row counted itself in row_done after its own read.
  if (threadIdx.x == 0) {
    if (c.row_chunks == 1 || atomicAdd(&row_done[c.row], 1) == c.row_chunks - 1) {
      if (c.row_chunks > 1) row_done[c.row] = 0;
      steps[c.row] += 1;
    }
  }
}

template <class T>
const T* typed(const void* p, int64_t offset) {
  return static_cast<const T*>(p) + offset;
}

// Elements per block and vectors in flight per thread, per parameter dtype.
// The defaults are the fastest measured (docs/benchmarks.md, "CUDA"): one
// vector per thread, as the tiny-tensor set wants short loops;
// DMUON_ADAM_TILING_FP32 / DMUON_ADAM_TILING_BF16 = "<unroll>:<chunk>"
// (unroll 1, 2 or 4; chunk a multiple of 2048 elements) override them, for
// measuring other devices. Read once per process.
struct AdamTiling {
  int unroll;
  int64_t chunk;
};
// A malformed value keeps the default: the library prints nothing, and the
// results do not depend on the tiling, only the speed does.
AdamTiling tiling_from_env(const char* name, AdamTiling fallback) {
  const char* v = std::getenv(name);
  int unroll = 0;
  long long chunk = 0;
  char tail = 0;
  if (v == nullptr || std::sscanf(v, "%d:%lld%c", &unroll, &chunk, &tail) != 2) return fallback;
  if ((unroll != 1 && unroll != 2 && unroll != 4) || chunk < 2048 || chunk > (1 << 22) || chunk % 2048) return fallback;
  return {unroll, chunk};
}
AdamTiling adam_tiling(Dtype d) {
  static const AdamTiling tiling[kNumDtypes] = {
      tiling_from_env("DMUON_ADAM_TILING_FP32", {1, 8192}),
      tiling_from_env("DMUON_ADAM_TILING_BF16", {1, 8192}),
  };
  return tiling[static_cast<int>(d)];
}

template <class T>
void launch_adam(int unroll, int blocks, cudaStream_t stream, T* param, const T* grad, float* m, float* v,
                 float* master, const AdamChunk* chunks, const AdamScalarRow* rows, int64_t* steps, int* row_done,
                 const StepStats* stats, StepStats* finish, int derive, float grad_scale) {
  if (unroll == 1)
    adam_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(param, grad, m, v, master, chunks, rows, steps, row_done, stats,
                                                       finish, derive, grad_scale);
  else if (unroll == 4)
    adam_kernel<T, 4><<<blocks, kThreads, 0, stream>>>(param, grad, m, v, master, chunks, rows, steps, row_done, stats,
                                                       finish, derive, grad_scale);
  else
    adam_kernel<T, 2><<<blocks, kThreads, 0, stream>>>(param, grad, m, v, master, chunks, rows, steps, row_done, stats,
                                                       finish, derive, grad_scale);
}

}  // namespace

void CudaBackend::accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, double scale,
                                   StepStats* stats) {
  if (!count || replaying()) return;
  require(current_ != nullptr, DMUON_ERR_INTERNAL, "cuda backend: accumulate_sumsq outside a step");
  CudaStepState& st = *current_;
  if (dtype == Dtype::fp32)
    sumsq_partial<<<kSumsqBlocks, kThreads, 0, st.stream>>>(typed<float>(buf, offset), count, st.sumsq_partials);
  else
    sumsq_partial<<<kSumsqBlocks, kThreads, 0, st.stream>>>(typed<uint16_t>(buf, offset), count, st.sumsq_partials);
  launch_check("sumsq_partial");
  sumsq_finish<<<1, kThreads, 0, st.stream>>>(st.sumsq_partials, kSumsqBlocks, scale * scale, &stats->sumsq);
  launch_check("sumsq_finish");
}

void CudaBackend::finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed,
                               bool adam_follows) {
  require(current_ != nullptr, DMUON_ERR_INTERNAL, "cuda backend: finish_stats outside a step");
  // max_norm changes through a setter: it reaches the kernel through the
  // staged header, so a captured step picks up the new value.
  const StepHeader h{max_norm, 0.f, 0.f};
  const StepHeader* dev = static_cast<const StepHeader*>(stage(kPieceHeader, &h, sizeof h));
  if (replaying()) return;
  if (!norm_computed && adam_follows) {  // the Adam kernel finishes them: one graph node fewer
    current_->stats_unfinished = stats;
    return;
  }
  finish_stats_kernel<<<1, 1, 0, current_->stream>>>(stats, dev, skip_nonfinite, norm_computed);
  launch_check("finish_stats_kernel");
}

void CudaBackend::finish_unfinished_stats(CudaStepState& st) {
  if (!st.stats_unfinished) return;
  StepStats* stats = st.stats_unfinished;
  st.stats_unfinished = nullptr;
  finish_stats_kernel<<<1, 1, 0, st.stream>>>(stats, nullptr, 0, 0);
  launch_check("finish_stats_kernel");
}

void CudaBackend::adam_update(const AdamBuffers (&buffers)[kNumDtypes], const float (&grad_scale)[kNumDtypes],
                              const AdamScalarRow* rows, int num_rows, int64_t* steps, const StepStats* stats) {
  require(current_ != nullptr, DMUON_ERR_INTERNAL, "cuda backend: adam_update outside a step");
  CudaStepState& st = *current_;
  if (!st.forked) {
    adam_enqueue(st, st.stream, buffers, grad_scale, rows, num_rows, steps, stats);
    return;
  }
  // Beside the Muon work enqueued since muon_fork; the step's stream joins it
  // at once, so everything enqueued after this call follows both.
  st.forked = false;
  cuda_check(cudaStreamWaitEvent(st.adam_stream, st.muon_fork, 0), "cudaStreamWaitEvent (Adam fork)");
  auto join = [&st]() { return cudaEventRecord(st.adam_done, st.adam_stream) == cudaSuccess &&
                               cudaStreamWaitEvent(st.stream, st.adam_done, 0) == cudaSuccess; };
  try {
    adam_enqueue(st, st.adam_stream, buffers, grad_scale, rows, num_rows, steps, stats);
  } catch (...) {
    join();  // a capture must not end with the Adam stream still forked
    throw;
  }
  require(join(), DMUON_ERR_CUDA, "cuda backend: joining the Adam update to the step's stream failed");
}

void CudaBackend::adam_enqueue(CudaStepState& st, void* launch_stream, const AdamBuffers (&buffers)[kNumDtypes],
                               const float (&grad_scale)[kNumDtypes], const AdamScalarRow* rows, int num_rows,
                               int64_t* steps, const StepStats* stats) {
  const cudaStream_t launch = static_cast<cudaStream_t>(launch_stream);
  const auto* dev_rows = static_cast<const AdamScalarRow*>(
      stage(kPieceAdam, rows, sizeof(AdamScalarRow) * static_cast<std::size_t>(num_rows), launch));
  if (replaying()) return;
  if (st.adam_rows != num_rows) {
    // Chunk lists depend only on the plan (offsets, sizes): built once, at the
    // first step, and uploaded from pinned memory without waiting.
    std::vector<AdamChunk> lists[kNumDtypes];
    // Every row has at least one chunk (an empty one for an empty row): the
    // chunks advance the row's step count.
    for (int k = 0; k < num_rows; ++k) {
      const int64_t chunk = adam_tiling(static_cast<Dtype>(rows[k].dtype)).chunk;
      const int64_t n = std::max<int64_t>(1, (rows[k].numel + chunk - 1) / chunk);
      require(n <= INT32_MAX, DMUON_ERR_INTERNAL, "cuda backend: an Adam row of more than 2^31 chunks");
      for (int64_t j = 0; j < n; ++j)
        lists[rows[k].dtype].push_back(
            AdamChunk{k, static_cast<int32_t>(n), rows[k].offset + j * chunk, std::min(chunk, rows[k].numel - j * chunk)});
    }
    // The old lists may still be read by queued work (only after a re-plan);
    // the wait is bounded by collective_timeout_ms like every host wait.
    if (st.chunks_host) wait_for("Adam chunk lists (re-plan)", {st.stream}, nullptr);
    cudaFreeHost(st.chunks_host);
    st.chunks_host = nullptr;
    cudaFree(st.row_done);
    st.row_done = nullptr;
    cuda_check(cudaMalloc(&st.row_done, sizeof(int) * std::max(num_rows, 1)), "cudaMalloc (Adam row counters)");
    cuda_check(cudaMemsetAsync(st.row_done, 0, sizeof(int) * std::max(num_rows, 1), launch), "cudaMemsetAsync (Adam row counters)");
    std::size_t total = 0;
    for (auto& l : lists) total += l.size();
    cuda_check(cudaHostAlloc(&st.chunks_host, sizeof(AdamChunk) * std::max<std::size_t>(total, 1), cudaHostAllocDefault),
               "cudaHostAlloc (Adam chunks)");
    std::size_t at = 0;
    for (int d = 0; d < kNumDtypes; ++d) {
      cudaFree(st.chunks[d]);
      st.chunks[d] = nullptr;
      st.num_chunks[d] = static_cast<int>(lists[d].size());
      if (lists[d].empty()) continue;
      std::copy(lists[d].begin(), lists[d].end(), st.chunks_host + at);
      cuda_check(cudaMalloc(&st.chunks[d], sizeof(AdamChunk) * lists[d].size()), "cudaMalloc (Adam chunks)");
      cuda_check(cudaMemcpyAsync(st.chunks[d], st.chunks_host + at, sizeof(AdamChunk) * lists[d].size(),
                                 cudaMemcpyHostToDevice, launch),
                 "cudaMemcpyAsync (Adam chunks)");
      at += lists[d].size();
    }
    st.adam_rows = num_rows;
  }
  // Unfinished statistics (finish_stats): every launch derives the factor,
  // the first one finishes them.
  const int derive = st.stats_unfinished != nullptr;
  for (int d = 0; d < kNumDtypes; ++d) {
    if (!st.num_chunks[d]) continue;
    const AdamBuffers& b = buffers[d];
    const int unroll = adam_tiling(static_cast<Dtype>(d)).unroll;
    if (static_cast<Dtype>(d) == Dtype::fp32)
      launch_adam(unroll, st.num_chunks[d], launch, static_cast<float*>(b.param), static_cast<const float*>(b.grad),
                  b.exp_avg, b.exp_avg_sq, nullptr, st.chunks[d], dev_rows, steps, st.row_done, stats,
                  st.stats_unfinished, derive, grad_scale[d]);
    else
      launch_adam(unroll, st.num_chunks[d], launch, static_cast<uint16_t*>(b.param),
                  static_cast<const uint16_t*>(b.grad), b.exp_avg, b.exp_avg_sq, b.master, st.chunks[d], dev_rows,
                  steps, st.row_done, stats, st.stats_unfinished, derive, grad_scale[d]);
    launch_check("adam_kernel");
    st.stats_unfinished = nullptr;
  }
  finish_unfinished_stats(st);  // no dtype had chunks (every row has one, so not expected)
}

}  // namespace dmuon
