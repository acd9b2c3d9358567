// A small shape's whole Muon step in one kernel (cuda_ns_fused.hpp): one
// block per matrix (blockIdx.y), the iteration in its shared memory. X
// (k x n), the scratch Xn and the k x k matrices A and B are kept as bf16,
// zero-padded to multiples of 16 (the padding stays zero through the
// iteration). Each warp computes 16 x 16 output tiles with bf16 tensor-core
// operations (mma.sync m16n8k16, fp32 accumulation, operands loaded by
// ldmatrix) and rounds them from its registers, as the GEMM path rounds each
// product's result.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/backend.hpp"
#include "backends/cuda/cuda_bf16_pair.cuh"
#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_muon_elements.cuh"
#include "backends/cuda/cuda_ns_fused.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "core/step_stats.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {

namespace {

constexpr int kMaxSteps = 100;  // options' muon_ns_steps limit
constexpr int kWarps = kThreads / 32;
// Leading dimensions in shared memory: a 16-byte row pad, so that the eight
// rows an ldmatrix phase reads, and the eight rows of a fragment's stores,
// fall in different banks.
constexpr int kLdX = kNsFusedMaxN + 8, kLdA = kNsFusedMaxK + 8;
constexpr std::size_t kBytesX = sizeof(uint16_t) * kNsFusedMaxK * kLdX, kBytesA = sizeof(uint16_t) * kNsFusedMaxK * kLdA;
constexpr std::size_t kSmemBytes = 2 * kBytesX + 2 * kBytesA;
// Elements of the largest matrix per thread.
constexpr int kRuns = kNsFusedMaxK * kNsFusedMaxN / kThreads;

struct FusedArgs {
  NsFusedStep s;
  int k, n, tall, steps;
  float norm_factor, eps;
  NsCoefficients c[kMaxSteps];
};

// out (M x N, multiples of 16) = alpha L R + beta in, all in shared memory:
// L row-major (ldl), R row-major or, with r_is_transpose, the transpose of a
// row-major N x K matrix (ldr); in and out row-major (ldo), in != out. Each
// warp takes every kWarps-th 16 x 16 tile, two at a time (independent chains
// of tensor-core operations in flight); a tile is two m16n8 accumulators.
template <bool r_is_transpose>
__device__ void product(int M, int N, int K, float alpha, const uint16_t* L, int ldl, const uint16_t* R, int ldr,
                        float beta, const uint16_t* in, uint16_t* out, int ldo) {
#if __CUDA_ARCH__ >= 800
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tn = N / 16, tiles = (M / 16) * tn;
  // The rows this lane addresses for ldmatrix: of L, row lane % 16 at column
  // (lane / 16) * 8; of R, matrix q = lane / 8 holds (k half q % 2, n half q / 2).
  const int q = lane / 8, r8 = lane % 8;
  const int l_row = lane % 16, l_col = (lane / 16) * 8;
  for (int t = warp; t < tiles; t += 2 * kWarps) {
    const int count = t + kWarps < tiles ? 2 : 1;
    int i0[2], j0[2];
    float acc[2][2][4] = {};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int tile = u < count ? t + u * kWarps : t;
      i0[u] = (tile / tn) * 16;
      j0[u] = (tile % tn) * 16;
    }
#pragma unroll 4
    for (int l = 0; l < K; l += 16) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (u == count) break;
        uint32_t a[4], b[4];
        load_x4<false>(a, L + (i0[u] + l_row) * ldl + l + l_col);
        if (r_is_transpose)
          load_x4<false>(b, R + (j0[u] + (q / 2) * 8 + r8) * ldr + l + (q % 2) * 8);
        else
          load_x4<true>(b, R + (l + (q % 2) * 8 + r8) * ldr + j0[u] + (q / 2) * 8);
        mma16816(acc[u][0], a, b[0], b[1]);
        mma16816(acc[u][1], a, b[2], b[3]);
      }
    }
    // Accumulator (m16n8): this lane's pairs at row lane / 4 (+ 8), columns 2 (lane % 4), +1.
    const int g = lane / 4, c2 = 2 * (lane % 4);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u == count) break;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int o = (i0[u] + g + 8 * h) * ldo + j0[u] + nb * 8 + c2;
          const uint32_t p = beta != 0.f ? *reinterpret_cast<const uint32_t*>(in + o) : 0u;
          const float lo = alpha * acc[u][nb][2 * h] + beta * __uint_as_float(p << 16);
          const float hi = alpha * acc[u][nb][2 * h + 1] + beta * __uint_as_float(p & 0xffff0000u);
          *reinterpret_cast<uint32_t*>(out + o) = bf16_pair(lo, hi);
        }
    }
  }
#endif
}

template <class T>
__global__ void __launch_bounds__(kThreads) ns_fused_kernel(const __grid_constant__ FusedArgs a) {
  await_prerequisite_kernels();
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* X = reinterpret_cast<uint16_t*>(smem);
  uint16_t* Xn = reinterpret_cast<uint16_t*>(smem + kBytesX);
  uint16_t* A = reinterpret_cast<uint16_t*>(smem + 2 * kBytesX);
  uint16_t* B = reinterpret_cast<uint16_t*>(smem + 2 * kBytesX + kBytesA);
  const MuonMatrix mt = a.s.mats[blockIdx.y];
  // Inactive or skipped: nothing changes (the separate passes' zero X leads
  // to no update either).
  if (!mt.active || a.s.stats->skip) return;
  const int k = a.k, n = a.n, kp = (k + 15) / 16 * 16, np = (n + 15) / 16 * 16, numel = k * n;
  // X(i, j) of the stored element e: a wide matrix's own row-major buffer, a
  // tall one's read as its transpose.
  auto xi = [&](int e) { return a.tall ? e % k : e / n; };
  auto xj = [&](int e) { return a.tall ? e / k : e % n; };
  // Momentum (momentum_kernel's arithmetic), in the stored order; every load
  // issued before the first store.
  const T* g = static_cast<const T*>(a.s.grad) + mt.offset;
  float* buf = a.s.momentum + mt.momentum_offset;
  const float m = *a.s.momentum_coef, clip = static_cast<float>(a.s.stats->clip_coef);
  float gv[kRuns], bv[kRuns];
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int e = threadIdx.x + u * kThreads;
    gv[u] = e < numel ? load_f32(g, e) : 0.f;
    bv[u] = e < numel ? buf[e] : 0.f;
  }
  float sumsq = 0.f;
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int e = threadIdx.x + u * kThreads;
    if (e >= numel) break;
    const uint16_t x = float_to_bf16(momentum_element(gv[u] * clip, bv[u], m, a.s.nesterov));
    buf[e] = bv[u];
    X[xi(e) * kLdX + xj(e)] = x;
    const float r = bf16_to_float(x);
    sumsq += r * r;
  }
  // Normalised as normalise_kernel rounds it, the padding zeroed.
  const float scale = norm_scale(block_sum(sumsq), a.norm_factor, a.eps);
  for (int e = threadIdx.x; e < kp * np; e += kThreads) {
    const int i = e / np, j = e % np;
    uint16_t& x = X[i * kLdX + j];
    x = i < k && j < n ? float_to_bf16(bf16_to_float(x) * scale) : uint16_t{0};
  }
  __syncthreads();
  // The iteration of core/newton_schulz.hpp.
  for (int s = 0; s < a.steps; ++s) {
    const NsCoefficients c = a.c[s];
    product<true>(kp, kp, np, 1.f, X, kLdX, X, kLdX, 0.f, nullptr, A, kLdA);  // A = X X^T
    __syncthreads();
    product<false>(kp, kp, kp, c.c, A, kLdA, A, kLdA, c.b, A, B, kLdA);     // B = c A A + b A
    __syncthreads();
    product<false>(kp, np, kp, 1.f, B, kLdA, X, kLdX, c.a, X, Xn, kLdX);    // Xn = B X + a X
    __syncthreads();
    uint16_t* t = X;
    X = Xn;
    Xn = t;
  }
  // The update (update_kernel's arithmetic), in the stored order.
  T* p = static_cast<T*>(a.s.param) + mt.offset;
  float* w = a.s.master ? a.s.master + mt.momentum_offset : nullptr;
  for (int e = threadIdx.x; e < numel; e += kThreads) {
    const float start = w ? master_or_param(w[e], float_to_bf16(load_f32(p, e))) : load_f32(p, e);
    const float next = update_element(start, mt.decay, mt.lr, bf16_to_float(X[xi(e) * kLdX + xj(e)]));
    if (w) w[e] = next;
    store_f32(p, e, next);
  }
}

}  // namespace

bool ns_fused_fits(int64_t rows, int64_t cols) {
  if (std::min(rows, cols) > kNsFusedMaxK || std::max(rows, cols) > kNsFusedMaxN) return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 8 ||
      cudaFuncSetAttribute(ns_fused_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) !=
          cudaSuccess ||
      cudaFuncSetAttribute(ns_fused_kernel<uint16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) !=
          cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

void ns_fused_step(CudaStepState& st, const ShapeWork& w, const NsFusedStep& s,
                   const std::vector<NsCoefficients>& coeffs, float norm_factor, float eps) {
  require(w.fused && coeffs.size() <= static_cast<std::size_t>(kMaxSteps), DMUON_ERR_INTERNAL,
          "fused Newton-Schulz on a shape it does not fit");
  FusedArgs a{};
  a.s = s;
  a.k = static_cast<int>(std::min(w.rows, w.cols));
  a.n = static_cast<int>(std::max(w.rows, w.cols));
  a.tall = w.rows > w.cols;
  a.steps = static_cast<int>(coeffs.size());
  a.norm_factor = norm_factor;
  a.eps = eps;
  std::copy(coeffs.begin(), coeffs.end(), a.c);
  const dim3 grid(1, static_cast<unsigned>(w.count));
  if (w.dtype == Dtype::fp32)
    ns_fused_kernel<float><<<grid, kThreads, kSmemBytes, st.stream>>>(a);
  else
    ns_fused_kernel<uint16_t><<<grid, kThreads, kSmemBytes, st.stream>>>(a);
  launch_check("ns_fused_kernel");
}

}  // namespace dmuon
