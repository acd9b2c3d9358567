// Muon on the CUDA backend: for each batch of same-shape owned matrices,
// momentum (+ the Frobenius sum of squares), normalisation, Newton-Schulz in
// bf16 with fp32 accumulation through batched cuBLASLt matmuls (the shared
// newton_schulz_iterate template over a cuBLAS engine), and the update. Each
// shape is captured in a CUDA graph after one eager warm-up call and replayed.
// The two symmetric products of an iteration may run over row blocks
// (cuda_ns_symmetric.cu), the Gram iteration may replace the plain one, or a
// small shape may run its whole step, momentum to update, in one kernel
// (cuda_ns_fused.cu), as chosen per shape at its first call (cuda_ns_tune.cu).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_graph_exec.hpp"
#include "backends/cuda/cuda_muon_elements.cuh"
#include "backends/cuda/cuda_ns_fused.hpp"
#include "backends/cuda/cuda_ns_symmetric.hpp"
#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "core/newton_schulz.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {

namespace {

struct MuonHeader {
  float momentum;
  float pad_[7];  // keeps the matrix rows that follow 32-byte aligned
};

// The element passes of a step (momentum, normalisation, update) are memory
// bound: each thread moves kVec elements per access (16 bytes of bf16), and a
// shape's grid holds about kPassBlocks blocks over its whole batch (see
// make_work), enough loads in flight to keep HBM busy; scalar code left a
// single matrix's pass latency bound (docs/decisions.md, "CUDA backend"). A
// matrix whose offsets or size are not
// multiples of kVec takes the scalar loop; the per-element arithmetic is the
// same on both paths.
constexpr int kVec = 8;
constexpr int64_t kPassBlocks = 1024;

struct Vec8 {
  float v[kVec];
};

__device__ inline Vec8 load8(const float* p) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  return Vec8{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
}
__device__ inline Vec8 load8(const uint16_t* p) {
  const uint4 x = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
  Vec8 r;
  for (int k = 0; k < 4; ++k) {
    r.v[2 * k] = bf16_to_float(static_cast<uint16_t>(w[k] & 0xffffu));
    r.v[2 * k + 1] = bf16_to_float(static_cast<uint16_t>(w[k] >> 16));
  }
  return r;
}
__device__ inline void store8(float* p, const Vec8& r) {
  reinterpret_cast<float4*>(p)[0] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(r.v[4], r.v[5], r.v[6], r.v[7]);
}
__device__ inline void store8(uint16_t* p, const Vec8& r) {
  uint32_t w[4];
  for (int k = 0; k < 4; ++k)
    w[k] = uint32_t(float_to_bf16(r.v[2 * k])) | (uint32_t(float_to_bf16(r.v[2 * k + 1])) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// The momentum (momentum_element), written as bf16 into X in the matrix's own
// row-major order (a tall matrix is handled by the engine's column-major view,
// not by a transpose), with per-block sums of squares of the rounded values
// for the Frobenius norm. Inactive or skipped: X = 0 and the momentum untouched.
// With `scales`, the last block of a matrix to finish (counted in `arrivals`,
// which it resets) sums the partials as the normalisation kernel would and
// stores the NormScale scalars for a Gram iteration that applies s in its
// products (and the update in its last).

// Per matrix, the device-side alphas and betas of the Gram products that read
// the input or write the parameter (NsEngine::gemm_input, gemm_result).
enum NormScale : int {
  kScale,              // s = 1 / max(factor ||X||_F, eps)
  kScale2,             // s^2
  kZero,               // beta of a product that overwrites its output
  kUpdateAlpha,        // -lr (0 where the matrix is inactive or the step skipped)
  kUpdateBeta,         // the decay 1 - lr wd (1 likewise)
  kUpdateAlphaScaled,  // -lr s: the last product is the first to read the input
  kNormScales = 8      // floats per matrix (32 bytes)
};

// What the update in the last product asks of a parameter, which sits
// anywhere in the flat buffer (cuBLASLt's heuristic otherwise assumes 256):
// its plan is chosen for this alignment, and a less aligned one keeps the pass.
constexpr uintptr_t kParamAlignment = 16;

template <class T>
__global__ void __launch_bounds__(kThreads) momentum_kernel(const T* __restrict__ grad, float* __restrict__ momentum,
                                                            const MuonMatrix* mats, const MuonHeader* hdr,
                                                            const StepStats* stats, int64_t numel, int nesterov,
                                                            uint16_t* __restrict__ X, float* __restrict__ partials,
                                                            float factor, float eps, float* scales, unsigned* arrivals) {
  await_prerequisite_kernels();
  const MuonMatrix mt = mats[blockIdx.y];
  const bool live = mt.active && !stats->skip;
  const float m = hdr->momentum, clip = static_cast<float>(stats->clip_coef);
  uint16_t* x = X + blockIdx.y * numel;
  float acc = 0.f;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  if (((mt.offset | mt.momentum_offset | numel) & (kVec - 1)) == 0) {
    const T* g = grad + mt.offset;
    float* buf = momentum + mt.momentum_offset;
    for (int64_t v = blockIdx.x * int64_t(kThreads) + threadIdx.x; v < numel / kVec; v += stride) {
      Vec8 u{};
      if (live) {
        const Vec8 gv = load8(g + v * kVec);
        Vec8 bv = load8(buf + v * kVec);
        for (int k = 0; k < kVec; ++k) u.v[k] = momentum_element(gv.v[k] * clip, bv.v[k], m, nesterov);
        store8(buf + v * kVec, bv);
      }
      store8(x + v * kVec, u);
      for (int k = 0; k < kVec; ++k) {
        const float r = bf16_to_float(float_to_bf16(u.v[k]));
        acc += r * r;
      }
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < numel; i += stride) {
      float u = 0.f;
      if (live) u = momentum_element(load_f32(grad, mt.offset + i) * clip, momentum[mt.momentum_offset + i], m, nesterov);
      const uint16_t ub = float_to_bf16(u);
      x[i] = ub;
      const float r = bf16_to_float(ub);
      acc += r * r;
    }
  }
  const float s = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = s;
  if (!scales) return;
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's partial is visible before it counts as arrived
    last = atomicAdd(&arrivals[blockIdx.y], 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Volatile: the other blocks' partials are read from memory, past any cache.
  const volatile float* mine = partials + blockIdx.y * gridDim.x;
  const float scale = norm_scale_from_partials(mine, gridDim.x, factor, eps);
  if (threadIdx.x == 0) {
    float* out = scales + kNormScales * blockIdx.y;
    out[kScale] = scale;
    out[kScale2] = scale * scale;
    out[kZero] = 0.f;
    out[kUpdateAlpha] = live ? -mt.lr : 0.f;
    out[kUpdateBeta] = live ? mt.decay : 1.f;
    out[kUpdateAlphaScaled] = out[kUpdateAlpha] * scale;
    arrivals[blockIdx.y] = 0;  // ready for the next step (or graph replay)
  }
}

// X /= max(factor * ||X||_F, eps), the norm summed from the partials in a
// fixed order by each block itself (no extra launch, deterministic).
__global__ void __launch_bounds__(kThreads) normalise_kernel(uint16_t* X, const float* partials, int64_t numel,
                                                             float factor, float eps) {
  await_prerequisite_kernels();
  const float scale = norm_scale_from_partials(partials + blockIdx.y * gridDim.x, gridDim.x, factor, eps);
  uint16_t* x = X + blockIdx.y * numel;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  if ((numel & (kVec - 1)) == 0) {
    for (int64_t v = blockIdx.x * int64_t(kThreads) + threadIdx.x; v < numel / kVec; v += stride) {
      Vec8 r = load8(x + v * kVec);
      for (int k = 0; k < kVec; ++k) r.v[k] *= scale;
      store8(x + v * kVec, r);
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < numel; i += stride)
      x[i] = float_to_bf16(bf16_to_float(x[i]) * scale);
  }
}

// update_element (decay and lr per matrix, from the staged table).
// With master weights (bf16 only; `master` null otherwise, indexed like the
// momentum) the update starts from the master, or from the parameter the
// program wrote (master_or_param), and stores the master and its rounding.
template <class T>
__global__ void __launch_bounds__(kThreads) update_kernel(T* __restrict__ param, float* __restrict__ master,
                                                          const MuonMatrix* mats, const StepStats* stats,
                                                          int64_t numel, const uint16_t* __restrict__ O) {
  await_prerequisite_kernels();
  const MuonMatrix mt = mats[blockIdx.y];
  if (!mt.active || stats->skip) return;
  const uint16_t* o = O + blockIdx.y * numel;
  float* w = master ? master + mt.momentum_offset : nullptr;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  if (((mt.offset | mt.momentum_offset | numel) & (kVec - 1)) == 0) {
    T* p = param + mt.offset;
    for (int64_t v = blockIdx.x * int64_t(kThreads) + threadIdx.x; v < numel / kVec; v += stride) {
      Vec8 pv = load8(p + v * kVec);
      if (w) {
        const Vec8 wv = load8(w + v * kVec);
        for (int k = 0; k < kVec; ++k) pv.v[k] = master_or_param(wv.v[k], float_to_bf16(pv.v[k]));
      }
      const Vec8 ov = load8(o + v * kVec);
      for (int k = 0; k < kVec; ++k) pv.v[k] = update_element(pv.v[k], mt.decay, mt.lr, ov.v[k]);
      if (w) store8(w + v * kVec, pv);
      store8(p + v * kVec, pv);
    }
  } else {
    for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < numel; i += stride) {
      const int64_t j = mt.offset + i;
      const float start = w ? master_or_param(w[i], float_to_bf16(load_f32(param, j))) : load_f32(param, j);
      const float next = update_element(start, mt.decay, mt.lr, bf16_to_float(o[i]));
      if (w) w[i] = next;
      store_f32(param, j, next);
    }
  }
}

// M += alpha I over a batch of k x k bf16 matrices (the Gram iteration's Q = Z + a I).
__global__ void add_identity_kernel(uint16_t* M, int64_t k, int64_t total, float alpha) {
  await_prerequisite_kernels();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    uint16_t* d = M + (i / k) * k * k + (i % k) * (k + 1);
    *d = float_to_bf16(bf16_to_float(*d) + alpha);
  }
}

// M = S + alpha I over a batch of k x k bf16 matrices, eight elements per
// thread (k is a multiple of 16 wherever the Gram iteration runs): the copy
// and add_identity_kernel in one pass, with the same rounding.
__global__ void copy_add_identity_kernel(uint16_t* M, const uint16_t* S, int64_t k, int64_t vectors, float alpha) {
  await_prerequisite_kernels();
  const int64_t kk = k * k;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < vectors; v += int64_t(gridDim.x) * blockDim.x) {
    uint4 bits = reinterpret_cast<const uint4*>(S)[v];
    uint16_t* e = reinterpret_cast<uint16_t*>(&bits);
    const int64_t first = (v * 8) % kk;  // eight elements of one row: k % 8 == 0
    const int64_t row = first / k, col = first % k;
    if (row >= col && row < col + 8) e[row - col] = float_to_bf16(bf16_to_float(e[row - col]) + alpha);
    reinterpret_cast<uint4*>(M)[v] = bits;
  }
}

// The Engine of newton_schulz_iterate (and gram_newton_schulz_iterate): row-major bf16 matrices, batched with
// fixed strides, fp32 accumulation. A k x n matrix stored column-major (a tall
// matrix's own buffer read as its transpose) flips the operand order instead
// of moving data. The template's "copy C, then GEMM with beta" pairs become
// one cuBLASLt matmul reading C from the copy's source (D != C): no copy pass,
// half the traffic of the linear combination. With `sym`, the engine tracks
// which workspaces hold a symmetric matrix, as the CPU engine does: a product
// P P^T (X X^T), or P P of a symmetric P (A A) plus a multiple of a symmetric
// matrix, is symmetric and goes to the row-block products.
struct NsEngine {
  CudaStepState& st;
  int batch;
  bool col_major;
  SymShape* sym = nullptr;
  ShapeWork* work = nullptr;  // its algorithm choices, and the record of a tuning run
  struct Pending {
    uint16_t* dst = nullptr;
    const uint16_t* src = nullptr;
    long elements = 0;
  } pending;
  const uint16_t* symmetric[2] = {nullptr, nullptr};  // buffers now holding a symmetric matrix
  // The matrix's NormScale scalars (device): the input's normalisation,
  // applied by gemm_input (null: X was normalised by its own pass).
  const float* input_scale = nullptr;
  NsParamUpdate* update = nullptr;  // the parameter gemm_result may update

  bool is_symmetric(const uint16_t* p) const { return p && (p == symmetric[0] || p == symmetric[1]); }
  void mark(const uint16_t* C, bool symm) {
    for (const uint16_t*& s : symmetric)
      if (s == C) s = nullptr;
    if (!symm) return;
    for (const uint16_t*& s : symmetric)
      if (!s) {
        s = C;
        return;
      }
    symmetric[0] = C;
  }

  // The stream products go to now: the step's, or between fork() and
  // rejoin() the one beside it (st.ns_stream, with its own workspace).
  bool beside = false;
  bool beside_work = false;  // work enqueued beside since the last join()
  cudaStream_t stream() const { return beside ? st.ns_stream : st.stream; }
  void* workspace() const { return beside ? st.ns_workspace : st.cublas_workspace; }

  bool concurrent() const { return st.ns_workspace != nullptr && !sym; }
  void fork() {
    flush();
    cuda_check(cudaEventRecord(st.ns_fork, st.stream), "cudaEventRecord (Newton-Schulz fork)");
    cuda_check(cudaStreamWaitEvent(st.ns_stream, st.ns_fork, 0), "cudaStreamWaitEvent (Newton-Schulz fork)");
    beside = true;
  }
  void rejoin() {
    flush();
    cuda_check(cudaEventRecord(st.ns_join, st.ns_stream), "cudaEventRecord (Newton-Schulz join)");
    beside = false;
    beside_work = true;
  }
  void join() {  // a pending copy stays pending: it belongs to the step's stream either way
    if (!beside_work) return;
    cuda_check(cudaStreamWaitEvent(st.stream, st.ns_join, 0), "cudaStreamWaitEvent (Newton-Schulz join)");
    beside_work = false;
  }

  void copy(uint16_t* dst, const uint16_t* src, long elements) {
    flush();
    pending = {dst, src, elements};
  }
  // The Gram iteration's k x k matrices inside the k x n scratch.
  uint16_t* slice(uint16_t* big, long j) const {
    const long k = std::min(work->rows, work->cols);
    return big + j * batch * k * k;
  }
  void add_identity(uint16_t* M, float alpha, long k) {
    if (pending.dst == M && pending.elements == k * k && k % 8 == 0) {  // the copy that fills M, in the same pass
      const int64_t vectors = int64_t(k) * k * batch / 8;
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(1024, (vectors + kThreads - 1) / kThreads));
      copy_add_identity_kernel<<<blocks, kThreads, 0, stream()>>>(M, pending.src, k, vectors, alpha);
      launch_check("copy_add_identity_kernel");
      pending = {};
      return;
    }
    flush();  // the copy that filled M
    const int64_t total = int64_t(k) * batch;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(1024, (total + kThreads - 1) / kThreads));
    add_identity_kernel<<<blocks, kThreads, 0, stream()>>>(M, k, total, alpha);
    launch_check("add_identity_kernel");
  }
  void flush() {
    if (!pending.dst) return;
    cuda_check(cudaMemcpyAsync(pending.dst, pending.src, sizeof(uint16_t) * pending.elements * batch,
                               cudaMemcpyDeviceToDevice, stream()),
               "cudaMemcpyAsync (Newton-Schulz)");
    pending = {};
  }

  void gemm(bool trans_b, long M, long N, long K, float alpha, uint16_t* A, uint16_t* B, float beta, uint16_t* C) {
    const uint16_t* c_in = C;
    if (pending.dst == C && beta != 0.f) {
      c_in = pending.src;  // D = alpha op(A) op(B) + beta * (the copy's source)
      pending = {};
    }
    flush();
    // The iteration's roles: X X^T, then A A (+ b A), then B X (+ a X).
    const int role = trans_b ? 0 : (A == B ? 1 : 2);
    NsGemmCall* record = work->record && !work->record[role].valid ? &work->record[role] : nullptr;
    if (sym && A == B && M == N && (trans_b || is_symmetric(A))) {
      const uint16_t* sym_in = beta != 0.f ? c_in : nullptr;
      if ((!sym_in || (sym_in != C && is_symmetric(sym_in))) && sym_knows(*sym, A, sym_in, C)) {
        sym_product(st, *sym, A, alpha, beta, sym_in, C, work->algo[role], record);
        mark(C, true);
        return;
      }
    }
    mark(C, false);
    const ColMajor c = col_major_of(trans_b, M, N, K, A, B);
    LtPlan& plan = plan_of(c, false);
    if (plan.usable) {
      plan.algo = algo_at(plan.algos, work->algo[role]);
      if (record) *record = NsGemmCall{true, plan.op, plan.a, plan.b, plan.c, c.P, c.Q, c_in, C, alpha, beta, &plan.algos};
      cublas_check(cublasLtMatmul(st.lt, plan.op, &alpha, c.P, plan.a, c.Q, plan.b, &beta, c_in, plan.c, C, plan.c,
                                  &plan.algo, workspace(), kCublasWorkspace, stream()),
                   "cublasLtMatmul (Newton-Schulz)");
      return;
    }
    if (c_in != C)
      cuda_check(cudaMemcpyAsync(C, c_in, sizeof(uint16_t) * M * N * batch, cudaMemcpyDeviceToDevice, stream()),
                 "cudaMemcpyAsync (Newton-Schulz)");
    fallback_gemm(c, &alpha, &beta, C);
  }

  // C = s^power A op(B) (beta 0) for a product that reads the input X: with
  // input_scale, alpha and beta are read on the device (s and s^2 come from
  // the momentum pass of this very step); otherwise s = 1. Not one of the
  // timed roles: only steps pass an input_scale, never the tuner.
  void gemm_input(bool trans_b, long M, long N, long K, int power, uint16_t* A, uint16_t* B, uint16_t* C) {
    if (!input_scale || power == 0) return gemm(trans_b, M, N, K, 1.0f, A, B, 0.0f, C);
    flush();
    mark(C, false);
    const float* alpha = input_scale + (power == 1 ? kScale : kScale2);
    const float* beta = input_scale + kZero;
    const ColMajor c = col_major_of(trans_b, M, N, K, A, B);
    LtPlan& plan = plan_of(c, true);
    if (plan.usable) return matmul_device_scalars(c, plan, alpha, beta, C, "cublasLtMatmul (Newton-Schulz, scaled input)");
    cublas_check(cublasSetPointerMode(st.cublas, CUBLAS_POINTER_MODE_DEVICE), "cublasSetPointerMode");
    try {
      fallback_gemm(c, alpha, beta, C);
    } catch (...) {
      cublasSetPointerMode(st.cublas, CUBLAS_POINTER_MODE_HOST);
      throw;
    }
    cublas_check(cublasSetPointerMode(st.cublas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  }

  // The iteration's last product C = s^power A B. With `update`, it is
  // P = -lr s^power A B + decay P on the parameter P instead (the layout of
  // C, in P's type), where cuBLASLt has a plan; then update->done.
  void gemm_result(long M, long N, long K, int power, uint16_t* A, uint16_t* B, uint16_t* C) {
    if (!update || !input_scale) return gemm_input(false, M, N, K, power, A, B, C);
    flush();
    const ColMajor c = col_major_of(false, M, N, K, A, B);
    LtPlan& plan = plan_of(c, true, update);
    if (!plan.usable) return gemm_input(false, M, N, K, power, A, B, C);
    const float* alpha = input_scale + (power == 0 ? kUpdateAlpha : kUpdateAlphaScaled);
    matmul_device_scalars(c, plan, alpha, input_scale + kUpdateBeta, update->param, "cublasLtMatmul (Newton-Schulz, update)");
    update->done = true;
  }

  // The column-major call of a row-major product: C_cm(m x n) = op1(P) op2(Q).
  struct ColMajor {
    bool t1, t2;
    long m, n, k, ldp, ldq, ldc, sP, sQ, sC;
    uint16_t *P, *Q;
  };
  ColMajor col_major_of(bool trans_b, long M, long N, long K, uint16_t* A, uint16_t* B) const {
    ColMajor c;
    c.t1 = col_major ? false : trans_b;
    c.t2 = col_major ? trans_b : false;
    c.m = col_major ? M : N;
    c.n = col_major ? N : M;
    c.k = K;
    c.P = col_major ? A : B;
    c.Q = col_major ? B : A;
    c.ldp = col_major ? M : (trans_b ? K : N);
    c.ldq = col_major ? (trans_b ? N : K) : K;
    c.ldc = c.m;
    c.sP = col_major ? M * K : K * N;
    c.sQ = col_major ? K * N : M * K;
    c.sC = M * N;
    return c;
  }

  // D = alpha op1(P) op2(Q) + beta D with alpha and beta on the device, in
  // place (C = D), with the heuristic's first algorithm: the roles' timed
  // choices index another plan's candidates.
  void matmul_device_scalars(const ColMajor& c, LtPlan& plan, const float* alpha, const float* beta, void* D,
                             const char* what) {
    cublas_check(cublasLtMatmul(st.lt, plan.op, alpha, c.P, plan.a, c.Q, plan.b, beta, D, plan.c, D, plan.c, &plan.algo,
                                workspace(), kCublasWorkspace, stream()),
                 what);
  }

  // cuBLAS' own batched GEMM where cuBLASLt's heuristic offered nothing;
  // alpha and beta are read as the handle's pointer mode says.
  void fallback_gemm(const ColMajor& c, const float* alpha, const float* beta, uint16_t* C) {
    if (beside) use_stream(st.ns_stream, st.ns_workspace);
    cublas_check(cublasGemmStridedBatchedEx(st.cublas, c.t1 ? CUBLAS_OP_T : CUBLAS_OP_N, c.t2 ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            int(c.m), int(c.n), int(c.k), alpha, c.P, CUDA_R_16BF, int(c.ldp), c.sP, c.Q,
                                            CUDA_R_16BF, int(c.ldq), c.sQ, beta, C, CUDA_R_16BF, int(c.ldc), c.sC, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (Newton-Schulz)");
    if (beside) use_stream(st.stream, st.cublas_workspace);
  }

  // cublasSetStream also puts the handle back on cuBLAS' own workspace pool,
  // which may allocate inside a step or a capture: ours follows every time.
  void use_stream(cudaStream_t s, void* ws) {
    cublas_check(cublasSetStream(st.cublas, s), "cublasSetStream");
    cublas_check(cublasSetWorkspace(st.cublas, ws, kCublasWorkspace), "cublasSetWorkspace");
  }

  // The plan of a product, its output in the workspace, or with `into` in
  // that parameter (its type, at kParamAlignment).
  LtPlan& plan_of(const ColMajor& c, bool device_scalars, const NsParamUpdate* into = nullptr) {
    const cudaDataType_t c_type = into && into->fp32 ? CUDA_R_32F : CUDA_R_16BF;
    const long output = into ? 1 + long(c_type) : 0;  // 0: the workspace
    const std::array<long, 10> key = {c.t1, c.t2, c.m, c.n, c.k, batch, c.ldp, c.ldq, device_scalars, output};
    auto it = st.lt_plans.find(key);
    if (it != st.lt_plans.end()) return it->second;
    LtPlan& p = st.lt_plans[key];
    auto layout = [&](cublasLtMatrixLayout_t& l, long rows, long cols, long ld, long stride,
                      cudaDataType_t type = CUDA_R_16BF) {
      const int64_t offset = stride;
      lt_batched_layout(l, rows, cols, ld, batch, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, offset, "", type);
    };
    cublas_check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t o1 = c.t1 ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = c.t2 ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &o1, sizeof o1), "cublasLtMatmulDescSetAttribute");
    cublas_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &o2, sizeof o2), "cublasLtMatmulDescSetAttribute");
    if (device_scalars) {
      const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
      cublas_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
                   "cublasLtMatmulDescSetAttribute");
    }
    layout(p.a, c.t1 ? c.k : c.m, c.t1 ? c.m : c.k, c.ldp, c.sP);
    layout(p.b, c.t2 ? c.n : c.k, c.t2 ? c.k : c.n, c.ldq, c.sQ);
    layout(p.c, c.m, c.n, c.ldc, c.sC, c_type);
    cublasLtMatmulPreference_t pref = nullptr;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = kCublasWorkspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (into) {
      const uint32_t align = kParamAlignment;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    }
    // The heuristic's top candidates: the first is its pick, the others are
    // timed against it at the shape's first use (cuda_ns_tune.cu).
    p.algos = lt_candidates(st.lt, p.op, p.a, p.b, p.c, pref);
    cublasLtMatmulPreferenceDestroy(pref);
    p.usable = !p.algos.empty();
    if (p.usable) p.algo = p.algos[0];
    return p;
  }
};

ShapeWork make_work(const MuonShapeBatch& b, cudaStream_t stream) {
  ShapeWork w;
  w.dtype = b.dtype;
  w.rows = b.rows;
  w.cols = b.cols;
  w.count = static_cast<int>(b.matrices.size());
  const int64_t numel = b.rows * b.cols, k = std::min(b.rows, b.cols);
  // About kPassBlocks blocks over the batch, each thread with at least one
  // vector of work; a fixed function of the shape, so the norm's summation
  // order is the same on every device and every step.
  const int64_t per_matrix = (kPassBlocks + w.count - 1) / w.count;
  const int64_t most = std::max<int64_t>(1, (numel / kVec + kThreads - 1) / kThreads);
  w.blocks_per_matrix = static_cast<int>(std::max<int64_t>(1, std::min(per_matrix, most)));
  try {
    cuda_check(cudaMalloc(&w.X, 2 * numel * w.count), "cudaMalloc (Newton-Schulz X)");
    cuda_check(cudaMalloc(&w.Xn, 2 * numel * w.count), "cudaMalloc (Newton-Schulz X)");
    cuda_check(cudaMalloc(&w.A, 2 * k * k * w.count), "cudaMalloc (Newton-Schulz A)");
    cuda_check(cudaMalloc(&w.B, 2 * k * k * w.count), "cudaMalloc (Newton-Schulz B)");
    cuda_check(cudaMalloc(&w.partials, sizeof(float) * w.count * w.blocks_per_matrix), "cudaMalloc (norm partials)");
    if (w.count == 1) w.param_offset = b.matrices[0].offset;
    cuda_check(cudaMalloc(&w.scales, sizeof(float) * kNormScales * w.count), "cudaMalloc (norm scales)");
    cuda_check(cudaMalloc(&w.arrivals, sizeof(unsigned) * w.count), "cudaMalloc (norm arrivals)");
    cuda_check(cudaMemsetAsync(w.arrivals, 0, sizeof(unsigned) * w.count, stream), "cudaMemsetAsync (norm arrivals)");
    // A product with device-side beta = 0 may read its output before it
    // overwrites it: Xn starts finite (zero), as every later result leaves it.
    cuda_check(cudaMemsetAsync(w.Xn, 0, 2 * numel * w.count, stream), "cudaMemsetAsync (Newton-Schulz X)");
  } catch (...) {
    w.release();
    throw;
  }
  return w;
}

template <class T>
void enqueue_shape(CudaStepState& st, ShapeWork& w, const MuonBuffers& buf, const MuonHyper& hyper,
                   const StepStats* stats, const MuonMatrix* mats, const MuonHeader* hdr) {
  const int64_t numel = w.rows * w.cols;
  const float norm_factor = static_cast<float>(ns_norm_factor(hyper.ns_schedule));
  if (w.fused) {
    const NsFusedStep s{buf.grad, buf.param, buf.momentum, buf.master, mats, &hdr->momentum, stats, hyper.nesterov};
    ns_fused_step(st, w, s, ns_coefficients(hyper.ns_schedule, hyper.ns_steps), norm_factor, hyper.ns_eps);
    return;
  }
  const dim3 grid(static_cast<unsigned>(w.blocks_per_matrix), static_cast<unsigned>(w.count));
  const bool gram = w.sym_blocks == kNsGramBlocks, defer = gram && w.defer_norm;
  momentum_kernel<T><<<grid, kThreads, 0, st.stream>>>(static_cast<const T*>(buf.grad), buf.momentum, mats, hdr, stats,
                                                       numel, hyper.nesterov, w.X, w.partials, norm_factor,
                                                       hyper.ns_eps, defer ? w.scales : nullptr, w.arrivals);
  launch_check("momentum_kernel");
  if (!defer) {
    normalise_kernel<<<grid, kThreads, 0, st.stream>>>(w.X, w.partials, numel, norm_factor, hyper.ns_eps);
    launch_check("normalise_kernel");
  }
  // The last product may apply the update itself (fuse_update): not with
  // master weights (the update starts from the master), not off kParamAlignment.
  NsParamUpdate update;
  update.param = static_cast<T*>(buf.param) + w.param_offset;
  update.fp32 = w.dtype == Dtype::fp32;
  const bool fuse =
      defer && w.fuse_update && !buf.master && reinterpret_cast<uintptr_t>(update.param) % kParamAlignment == 0;
  uint16_t* out = ns_iterate(st, w, w.sym.get(), ns_coefficients(hyper.ns_schedule, hyper.ns_steps), gram,
                             defer ? w.scales : nullptr, fuse ? &update : nullptr);
  if (update.done) return;
  update_kernel<T><<<grid, kThreads, 0, st.stream>>>(static_cast<T*>(buf.param), buf.master, mats, stats, numel, out);
  launch_check("update_kernel");
}

void enqueue(CudaStepState& st, ShapeWork& w, const MuonBuffers& buf, const MuonHyper& hyper, const StepStats* stats,
             const MuonMatrix* mats, const MuonHeader* hdr) {
  if (w.dtype == Dtype::fp32)
    enqueue_shape<float>(st, w, buf, hyper, stats, mats, hdr);
  else
    enqueue_shape<uint16_t>(st, w, buf, hyper, stats, mats, hdr);
}

// While a shape batch is enqueued on a lane (CudaStepState::ShapeLane), the
// step state's stream, workspaces and fork events are the lane's: every
// kernel, product, per-shape graph and fork beside of the shape then follows
// the lane without being told.
class LaneScope {
 public:
  LaneScope(CudaStepState& st, CudaStepState::ShapeLane* lane) : st_(st), lane_(lane) { swap(); }
  ~LaneScope() { swap(); }
  LaneScope(const LaneScope&) = delete;
  LaneScope& operator=(const LaneScope&) = delete;

 private:
  void swap() noexcept {
    if (!lane_) return;
    std::swap(st_.stream, lane_->stream);
    std::swap(st_.cublas_workspace, lane_->workspace);
    std::swap(st_.ns_stream, lane_->ns_stream);
    std::swap(st_.ns_workspace, lane_->ns_workspace);
    std::swap(st_.ns_fork, lane_->ns_fork);
    std::swap(st_.ns_join, lane_->ns_join);
  }
  CudaStepState& st_;
  CudaStepState::ShapeLane* lane_;
};

// The lanes a step forked, joined back into the step's stream by join(), or
// on unwinding by the destructor (errors ignored there): a capture must not
// end with a branch open, and an eager lane must finish before the next step
// overwrites the Muon table it reads. Either way the shared cuBLAS handle is
// bound to the step's stream and workspace again.
class LaneJoin {
 public:
  explicit LaneJoin(CudaStepState& st) : st_(st) {}
  ~LaneJoin() { join(false); }
  LaneJoin(const LaneJoin&) = delete;
  LaneJoin& operator=(const LaneJoin&) = delete;
  void fork(std::size_t lanes) {
    for (; forked_ < lanes; ++forked_)
      cuda_check(cudaStreamWaitEvent(st_.lanes[forked_].stream, st_.muon_fork, 0), "cudaStreamWaitEvent (lane fork)");
  }
  void join(bool checked = true) {
    if (!forked_) return;
    const std::size_t n = forked_;
    forked_ = 0;
    for (std::size_t l = 0; l < n; ++l) {
      CudaStepState::ShapeLane& lane = st_.lanes[l];
      const cudaError_t rec = cudaEventRecord(lane.done, lane.stream);
      const cudaError_t wait = cudaStreamWaitEvent(st_.stream, lane.done, 0);
      if (checked) {
        cuda_check(rec, "cudaEventRecord (lane join)");
        cuda_check(wait, "cudaStreamWaitEvent (lane join)");
      }
    }
    const cublasStatus_t bound = cublasSetStream(st_.cublas, st_.stream);
    const cublasStatus_t ws = cublasSetWorkspace(st_.cublas, st_.cublas_workspace, kCublasWorkspace);
    if (checked) {
      cublas_check(bound, "cublasSetStream");
      cublas_check(ws, "cublasSetWorkspace");
    }
  }

 private:
  CudaStepState& st_;
  std::size_t forked_ = 0;  // lanes beyond the step's stream that wait on muon_fork
};

// Whether the batches may run in lanes now: the lanes exist and every shape's
// products were chosen at an earlier step, so that no choice is timed while
// another shape runs.
bool lanes_ready(const CudaStepState& st, const std::vector<MuonShapeBatch>& batches) {
  if (st.lanes.empty() || batches.size() < 2 || st.shapes.size() < batches.size()) return false;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const ShapeWork& w = st.shapes[i];
    const MuonShapeBatch& b = batches[i];
    if (w.rows != b.rows || w.cols != b.cols || w.dtype != b.dtype || w.count != int(b.matrices.size()) ||
        !w.gram_chosen)
      return false;
  }
  return true;
}

// Makes the lanes beyond the step's stream, `wanted` in all, at an eager step;
// a lane that cannot be made (memory) leaves the shapes in the lanes made so
// far, and no further lane is tried.
void make_lanes(CudaStepState& st, std::size_t wanted) {
  const std::size_t extra = wanted > 1 ? wanted - 1 : 0;
  if (st.lanes_failed) return;
  try {
    while (st.lanes.size() < extra) {
      st.lanes.emplace_back();
      CudaStepState::ShapeLane& l = st.lanes.back();
      cuda_check(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate (lane)");
      cuda_check(cudaStreamCreateWithFlags(&l.ns_stream, cudaStreamNonBlocking), "cudaStreamCreate (lane)");
      for (cudaEvent_t* e : {&l.ns_fork, &l.ns_join, &l.done})
        cuda_check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate (lane)");
      cuda_check(cudaMalloc(&l.workspace, kCublasWorkspace), "cudaMalloc (lane workspace)");
    }
    // Where the step's order has a workspace beside (Gram's Q update), each lane gets one.
    for (CudaStepState::ShapeLane& l : st.lanes)
      if (st.ns_workspace && !l.ns_workspace)
        cuda_check(cudaMalloc(&l.ns_workspace, kCublasWorkspace), "cudaMalloc (lane workspace beside)");
  } catch (...) {  // an Error from CUDA, or the host's bad_alloc: the step itself has run
    cudaGetLastError();
    st.lanes_failed = true;
    if (!st.lanes.empty() && !st.lanes.back().workspace) {
      st.lanes.back().release();
      st.lanes.pop_back();
    }
  }
}

}  // namespace

uint16_t* ns_iterate(CudaStepState& st, ShapeWork& w, SymShape* sym, const std::vector<NsCoefficients>& coeffs,
                     bool gram, const float* input_scale, NsParamUpdate* update) {
  const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
  require(!gram || ns_gram_possible(k, n), DMUON_ERR_INTERNAL, "Gram Newton-Schulz on a shape it does not fit");
  require(!input_scale || (gram && w.count == 1), DMUON_ERR_INTERNAL,
          "Newton-Schulz: an input scale in the products needs the Gram iteration on one matrix");
  NsEngine e{st, w.count, w.rows > w.cols, gram ? nullptr : sym, &w, {}};
  e.input_scale = input_scale;
  e.update = update;
  e.use_stream(st.stream, st.cublas_workspace);
  uint16_t* out = gram ? gram_newton_schulz_iterate(e, w.X, w.Xn, w.A, w.B, k, n, coeffs)
                       : newton_schulz_iterate(e, w.X, w.Xn, w.A, w.B, k, n, coeffs);
  e.flush();
  return out;
}

void CudaBackend::muon_update(const MuonBuffers (&buffers)[kNumDtypes], const std::vector<MuonShapeBatch>& batches,
                              const MuonHyper& hyper, const StepStats* stats) {
  require(current_ != nullptr, DMUON_ERR_INTERNAL, "cuda backend: muon_update outside a step");
  CudaStepState& st = *current_;
  finish_unfinished_stats(st);  // the Muon kernels read them
  // The step's Muon scalars (momentum, per-matrix lr/decay/active) in one
  // staged table: header, then every batch's matrices.
  std::size_t total = 0;
  for (const MuonShapeBatch& b : batches) total += b.matrices.size();
  st.muon_table.resize(sizeof(MuonHeader) + sizeof(MuonMatrix) * total);
  MuonHeader h{};
  h.momentum = hyper.momentum;
  std::memcpy(st.muon_table.data(), &h, sizeof h);
  std::size_t at = sizeof h;
  for (const MuonShapeBatch& b : batches) {
    std::memcpy(st.muon_table.data() + at, b.matrices.data(), sizeof(MuonMatrix) * b.matrices.size());
    at += sizeof(MuonMatrix) * b.matrices.size();
  }
  char* dev = static_cast<char*>(stage(kPieceMuon, st.muon_table.data(), st.muon_table.size()));
  if (replaying()) return;
  // The Adam update may start here, beside the Muon work (adam_update).
  cuda_check(cudaEventRecord(st.muon_fork, st.stream), "cudaEventRecord (Adam fork)");
  st.forked = true;
  // Batch i runs in lane i mod L (lane 0: the stream itself), each lane
  // forked where the Adam update forks and joined back after its last batch.
  const std::size_t wanted = std::min<std::size_t>(std::max(ns_tuner().config.shape_lanes, 1), batches.size());
  const std::size_t lanes = lanes_ready(st, batches) ? std::min(wanted, st.lanes.size() + 1) : 1;
  LaneJoin lane_join(st);
  lane_join.fork(lanes - 1);
  at = sizeof h;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const std::size_t l = i % lanes;
    LaneScope in_lane(st, l ? &st.lanes[l - 1] : nullptr);
    run_shape(st, buffers[static_cast<int>(batches[i].dtype)], batches[i], i, hyper, stats, dev + at, dev);
    at += sizeof(MuonMatrix) * batches[i].matrices.size();
    if (l) ++st.lane_batches;
  }
  lane_join.join();
  // Lanes for the next step, now that this eager step has chosen every shape's products.
  if (st.mode == CudaStepState::Mode::eager && wanted > 1) make_lanes(st, wanted);
}

void CudaBackend::run_shape(CudaStepState& st, const MuonBuffers& buf, const MuonShapeBatch& batch, std::size_t index,
                            const MuonHyper& hyper, const StepStats* stats, const void* dev_mats, const void* dev_header) {
  if (st.shapes.size() <= index) st.shapes.resize(index + 1);
  ShapeWork& w = st.shapes[index];
  if (w.rows != batch.rows || w.cols != batch.cols || w.dtype != batch.dtype || w.count != int(batch.matrices.size())) {
    w.release();
    w = make_work(batch, st.stream);
  }
  const auto* mats = static_cast<const MuonMatrix*>(dev_mats);
  const auto* hdr = static_cast<const MuonHeader*>(dev_header);
  // The products are chosen at the shape's first call, always an eager step
  // (a whole-step graph is captured only after an eager warm-up step); the
  // choice may time the candidates, which waits for the device, so it stays
  // out of every later step.
  if (!w.gram_chosen && st.mode == CudaStepState::Mode::eager) {
    // The Gram iteration's work beside the main order has a workspace of its
    // own, allocated here (an eager step, never a capture) before the choice
    // times the Gram candidate, so the timing sees the step as it will run.
    const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
    const bool gram_may_run = hyper.ns_symmetric == DMUON_NS_SYMMETRIC_GRAM ||
                              (hyper.ns_symmetric == DMUON_NS_SYMMETRIC_AUTO && k >= kNsTuneMinRows);
    if (!st.ns_workspace && gram_may_run && ns_tuner().config.gram_beside && ns_gram_possible(k, n) &&
        gram_ns_fits_beside(k, n))
      cuda_check(cudaMalloc(&st.ns_workspace, kCublasWorkspace), "cudaMalloc (cuBLAS workspace beside)");
    ns_tuner().choose(st, w, hyper.ns_symmetric);
    // One device-side scalar per product serves one matrix, not a batch.
    w.defer_norm = w.count == 1 && ns_tuner().config.gram_defer_norm;
    w.fuse_update = w.defer_norm && ns_tuner().config.gram_fuse_update;
  }
  // Inside a whole-step capture the shape is simply part of that graph.
  if (!hyper.cuda_graphs || w.fallback || st.mode != CudaStepState::Mode::eager) {
    enqueue(st, w, buf, hyper, stats, mats, hdr);
    return;
  }
  // A graph bakes in pointers and launch settings: they form its key.
  int32_t eps_bits = 0;
  std::memcpy(&eps_bits, &hyper.ns_eps, sizeof eps_bits);
  // A fixed-size array: the replay path allocates nothing.
  const ShapeWork::GraphKey key = {buf.param, buf.grad, buf.momentum, buf.master, stats, dev_mats, dev_header, st.stream,
                                   reinterpret_cast<const void*>(intptr_t(hyper.nesterov)),
                                   reinterpret_cast<const void*>(intptr_t(hyper.ns_steps)),
                                   reinterpret_cast<const void*>(intptr_t(hyper.ns_schedule)),
                                   reinterpret_cast<const void*>(intptr_t(eps_bits))};
  if (w.exec && w.graph_key == key) {
    cuda_check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(w.exec), st.stream), "cudaGraphLaunch (Newton-Schulz shape)");
    return;
  }
  if (w.exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(w.exec));
  w.exec = nullptr;
  if (!w.warm || w.graph_key != key) {  // first call of this shape: eager warm-up
    enqueue(st, w, buf, hyper, stats, mats, hdr);
    w.warm = true;
    w.graph_key = key;
    return;
  }
  cuda_check(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture (Newton-Schulz shape)");
  std::string why;
  try {
    if (fail_next_capture_) {
      fail_next_capture_ = false;
      // A synchronisation is illegal in a capture: it invalidates it, for real.
      (void)cudaStreamSynchronize(st.stream);
    }
    enqueue(st, w, buf, hyper, stats, mats, hdr);
  } catch (const Error& e) {
    why = e.what();
  }
  cudaGraph_t g = nullptr;
  cudaError_t rc = cudaStreamEndCapture(st.stream, &g);
  cudaGraphExec_t exec = nullptr;
  if (rc == cudaSuccess && why.empty()) rc = instantiate_replayed_graph(&exec, g, st.stream);
  if (g) cudaGraphDestroy(g);
  if (rc != cudaSuccess || !why.empty()) {
    cudaGetLastError();  // clear the sticky-free capture error before going on
    w.fallback = true;
    w.note = why.empty() ? std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc) : why;
    choices_log_ += "ns " + std::to_string(w.rows) + "x" + std::to_string(w.cols) +
                    ": graph capture failed, eager from now on (" + w.note + ")\n";
    message(DMUON_MESSAGE_WARNING, "Newton-Schulz " + std::to_string(w.rows) + "x" + std::to_string(w.cols) +
                                       ": CUDA graph capture failed, this shape runs eagerly from now on (" + w.note + ")");
    enqueue(st, w, buf, hyper, stats, mats, hdr);  // nothing ran in the failed capture
    return;
  }
  w.exec = exec;
  cuda_check(cudaGraphLaunch(exec, st.stream), "cudaGraphLaunch (Newton-Schulz shape)");
}

}  // namespace dmuon
