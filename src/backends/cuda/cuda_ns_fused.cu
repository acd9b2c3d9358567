// Newton-Schulz of a small shape's batch in one kernel (cuda_ns_fused.hpp):
// one block per matrix (blockIdx.y), the whole iteration in its shared
// memory. X (k x n), the scratch Xn and the k x k matrices A and B are kept
// as bf16, zero-padded to multiples of 16 (the padding stays zero through the
// iteration); each warp computes 16 x 16 output tiles with bf16 tensor-core
// fragments (fp32 accumulation) and rounds them through its own fp32 scratch
// tile, as the GEMM path rounds each product's result.
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>

#include "backends/cuda/cuda_bf16_pair.cuh"
#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_ns_fused.hpp"
#include "backends/cuda/cuda_state.hpp"

namespace dmuon {

namespace {

constexpr int kMaxSteps = 100;  // options' muon_ns_steps limit
constexpr int kWarps = kThreads / 32;
// Leading dimensions in shared memory: a 16-byte row pad against bank conflicts.
constexpr int kLdX = kNsFusedMaxN + 8, kLdA = kNsFusedMaxK + 8;
constexpr std::size_t kBytesX = sizeof(uint16_t) * kNsFusedMaxK * kLdX, kBytesA = sizeof(uint16_t) * kNsFusedMaxK * kLdA;
constexpr std::size_t kSmemBytes = 2 * kBytesX + 2 * kBytesA + sizeof(float) * 256 * kWarps;

struct FusedArgs {
  uint16_t* X;  // the batch in the matrices' own order; the result is written back here
  const float* partials;
  int partials_per_matrix;
  int k, n, tall, steps;
  float norm_factor, eps;
  NsCoefficients c[kMaxSteps];
};

// out (M x N, multiples of 16) = alpha L R + beta in, all in shared memory:
// L row-major (ldl), R row-major or, with r_is_transpose, the transpose of a
// row-major N x K matrix (ldr); in and out row-major (ldo). Each warp takes
// every kWarps-th 16 x 16 tile, two at a time (two independent chains of
// tensor-core operations in flight).
template <bool r_is_transpose>
__device__ void product(int M, int N, int K, float alpha, const uint16_t* L, int ldl, const uint16_t* R, int ldr,
                        float beta, const uint16_t* in, uint16_t* out, int ldo, float* scratch) {
#if __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  using Layout = typename std::conditional<r_is_transpose, wmma::col_major, wmma::row_major>::type;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tn = N / 16, tiles = (M / 16) * tn;
  for (int t = warp; t < tiles; t += 2 * kWarps) {
    const int count = t + kWarps < tiles ? 2 : 1;
    int i0[2], j0[2];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      i0[u] = ((t + u * kWarps) / tn) * 16;
      j0[u] = ((t + u * kWarps) % tn) * 16;
      wmma::fill_fragment(acc[u], 0.f);
    }
    for (int l = 0; l < K; l += 16) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (u == count) break;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, Layout> b;
        wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(L + i0[u] * ldl + l), ldl);
        wmma::load_matrix_sync(
            b, reinterpret_cast<const __nv_bfloat16*>(r_is_transpose ? R + j0[u] * ldr + l : R + l * ldr + j0[u]), ldr);
        wmma::mma_sync(acc[u], a, b, acc[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u == count) break;
      wmma::store_matrix_sync(scratch, acc[u], 16, wmma::mem_row_major);
      __syncwarp();
      // Eight consecutive elements per lane: row lane / 2, columns (lane % 2) * 8 on.
      const int r = lane / 2, c = (lane % 2) * 8, o = (i0[u] + r) * ldo + j0[u] + c;
      const float4 s0 = *reinterpret_cast<const float4*>(scratch + r * 16 + c);
      const float4 s1 = *reinterpret_cast<const float4*>(scratch + r * 16 + c + 4);
      float v[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
      uint32_t w[4] = {0, 0, 0, 0};
      if (beta != 0.f) {
        const uint4 p = *reinterpret_cast<const uint4*>(in + o);
        w[0] = p.x, w[1] = p.y, w[2] = p.z, w[3] = p.w;
      }
      for (int h = 0; h < 4; ++h) {
        const float lo = alpha * v[2 * h] + beta * __uint_as_float(w[h] << 16);
        const float hi = alpha * v[2 * h + 1] + beta * __uint_as_float(w[h] & 0xffff0000u);
        w[h] = bf16_pair(lo, hi);
      }
      *reinterpret_cast<uint4*>(out + o) = make_uint4(w[0], w[1], w[2], w[3]);
      __syncwarp();  // the scratch tile is reused
    }
  }
#endif
}

__global__ void __launch_bounds__(kThreads) ns_fused_kernel(const __grid_constant__ FusedArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* X = reinterpret_cast<uint16_t*>(smem);
  uint16_t* Xn = reinterpret_cast<uint16_t*>(smem + kBytesX);
  uint16_t* A = reinterpret_cast<uint16_t*>(smem + 2 * kBytesX);
  uint16_t* B = reinterpret_cast<uint16_t*>(smem + 2 * kBytesX + kBytesA);
  float* scratch = reinterpret_cast<float*>(smem + 2 * kBytesX + 2 * kBytesA) + 256 * (threadIdx.x / 32);
  const int k = a.k, n = a.n, kp = (k + 15) / 16 * 16, np = (n + 15) / 16 * 16;
  uint16_t* x = a.X + int64_t(blockIdx.y) * k * n;
  // X(i, j): a wide matrix's own row-major buffer, a tall one's read as its transpose.
  const int rs = a.tall ? 1 : n, cs = a.tall ? k : 1;
  const float scale = norm_scale_from_partials(a.partials + int64_t(blockIdx.y) * a.partials_per_matrix,
                                               static_cast<unsigned>(a.partials_per_matrix), a.norm_factor, a.eps);
  // In, normalised as normalise_kernel rounds it, padding zeroed: every load
  // issued before the first store.
  constexpr int kRuns = kNsFusedMaxK * kNsFusedMaxN / kThreads;
  uint16_t v[kRuns];
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int e = threadIdx.x + u * kThreads, i = e / kNsFusedMaxN, j = e % kNsFusedMaxN;
    v[u] = i < k && j < n ? x[i * rs + j * cs] : uint16_t{0};
  }
#pragma unroll
  for (int u = 0; u < kRuns; ++u) {
    const int e = threadIdx.x + u * kThreads, i = e / kNsFusedMaxN, j = e % kNsFusedMaxN;
    X[i * kLdX + j] = float_to_bf16(bf16_to_float(v[u]) * scale);
  }
  __syncthreads();
  // The iteration of core/newton_schulz.hpp.
  for (int s = 0; s < a.steps; ++s) {
    const NsCoefficients c = a.c[s];
    product<true>(kp, kp, np, 1.f, X, kLdX, X, kLdX, 0.f, nullptr, A, kLdA, scratch);  // A = X X^T
    __syncthreads();
    product<false>(kp, kp, kp, c.c, A, kLdA, A, kLdA, c.b, A, B, kLdA, scratch);     // B = c A A + b A
    __syncthreads();
    product<false>(kp, np, kp, 1.f, B, kLdA, X, kLdX, c.a, X, Xn, kLdX, scratch);    // Xn = B X + a X
    __syncthreads();
    uint16_t* t = X;
    X = Xn;
    Xn = t;
  }
  for (int e = threadIdx.x; e < k * n; e += kThreads) {
    const int i = e / n, j = e % n;
    x[i * rs + j * cs] = X[i * kLdX + j];
  }
}

}  // namespace

bool ns_fused_fits(int64_t rows, int64_t cols) {
  if (std::min(rows, cols) > kNsFusedMaxK || std::max(rows, cols) > kNsFusedMaxN) return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 8 ||
      cudaFuncSetAttribute(ns_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

uint16_t* ns_fused_iterate(CudaStepState& st, ShapeWork& w, const std::vector<NsCoefficients>& coeffs,
                           float norm_factor, float eps) {
  require(w.fused && coeffs.size() <= static_cast<std::size_t>(kMaxSteps), DMUON_ERR_INTERNAL,
          "fused Newton-Schulz on a shape it does not fit");
  FusedArgs a{};
  a.X = w.X;
  a.partials = w.partials;
  a.partials_per_matrix = w.blocks_per_matrix;
  a.k = static_cast<int>(std::min(w.rows, w.cols));
  a.n = static_cast<int>(std::max(w.rows, w.cols));
  a.tall = w.rows > w.cols;
  a.steps = static_cast<int>(coeffs.size());
  a.norm_factor = norm_factor;
  a.eps = eps;
  std::copy(coeffs.begin(), coeffs.end(), a.c);
  ns_fused_kernel<<<dim3(1, static_cast<unsigned>(w.count)), kThreads, kSmemBytes, st.stream>>>(a);
  launch_check("ns_fused_kernel");
  return w.X;
}

}  // namespace dmuon
