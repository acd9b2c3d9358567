// A mid-size shape's whole Muon step in one kernel (cuda_ns_cluster.hpp): a
// cluster of blocks per matrix (blockIdx.y), each block owning 64 x 64 tiles
// of the products (tile t of a product goes to block t mod cluster size). X
// (k x n, the smaller side first), Xn, A and B (k x k) live in the shape's
// workspaces, row-major and unpadded; a product stages the block's rows of
// the left operand and the needed rows or columns of the right one through
// cp.async (L2 only: peers wrote them), zero past the edges, computes on
// mma.sync m16n8k16 and rounds from registers as the GEMM path rounds each
// product's result. The cluster's barrier orders each product's writes before
// the next product's reads.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/backend.hpp"
#include "backends/cuda/cuda_bf16_pair.cuh"
#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_muon_elements.cuh"
#include "backends/cuda/cuda_ns_cluster.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "core/step_stats.hpp"

namespace dmuon {

namespace {

namespace cg = cooperative_groups;

constexpr int kMaxSteps = 100;  // options' muon_ns_steps limit
constexpr int kTile = 64;       // output tile edge
constexpr int kChunk = 64;      // K columns staged per cp.async group
constexpr int kMaxN = static_cast<int>(kNsClusterMaxN);
// Staging leading dimensions, padded by 16 bytes so that the eight rows of
// an ldmatrix phase fall in different banks: the left operand (and a
// transposed right one) as 64 rows x K, a plain right operand as K rows x 64.
constexpr int kLdL = kMaxN + 8, kLdR = kTile + 8;
constexpr std::size_t kBytesL = sizeof(uint16_t) * kTile * kLdL;
constexpr std::size_t kBytesR = sizeof(uint16_t) * (kTile * kLdL > kMaxN * kLdR ? kTile * kLdL : kMaxN * kLdR);
constexpr std::size_t kSmemBytes = kBytesL + kBytesR;
// A cluster of 8 (the portable size) over a 256 x 256 matrix's 16 tiles.
constexpr int kMaxTilesPerBlock = 2;
constexpr int kPerTile = kTile * kTile / kThreads;
constexpr int kPerThread = kMaxTilesPerBlock * kPerTile;
constexpr int kMaxClusterBlocks = 16;

struct ClusterArgs {
  NsFusedStep s;
  uint16_t *X, *Xn, *A, *B;  // the shape's workspaces, matrix m at m * k * n (X, Xn) and m * k * k (A, B)
  int k, n, tall, steps, ta, tx;  // ta, tx: 64-tiles along k and along n
  float norm_factor, eps;
  NsCoefficients c[kMaxSteps];
};

#if __CUDA_ARCH__ >= 900
// 16 bytes global -> shared through L2 only; zeros where !valid (no read).
__device__ inline void cp_async16(uint16_t* dst, const uint16_t* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most `pending` (0..3) of this thread's groups are in flight.
__device__ inline void cp_async_wait(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
  }
}

// Stage 64 rows from r0 of a row-major matrix (rows valid, K columns, ld),
// columns [c0, c0 + w), into S (64 x kLdL, column index absolute).
__device__ inline void stage_rows(uint16_t* S, const uint16_t* G, int r0, int rows, int K, int ld, int c0, int w) {
  const int pieces = w / 8;
  for (int e = threadIdx.x; e < kTile * pieces; e += kThreads) {
    const int r = e / pieces, col = c0 + (e % pieces) * 8, gr = r0 + r;
    const bool ok = gr < rows && col < K;
    cp_async16(S + r * kLdL + col, ok ? G + static_cast<long>(gr) * ld + col : G, ok);
  }
}

// out's 64 x 64 tile at (i0, j0) = alpha L R + beta in, elements past
// out_rows x out_cols left alone. L: rows i0.. of a row-major matrix with K
// columns (ldl, l_rows rows). R with r_t: rows j0.. of a row-major matrix
// with K columns (ldr, r_rows rows), used transposed; else rows 0..K of a
// row-major matrix, columns j0.. (ldr, r_cols columns). K and the column
// counts are multiples of 8.
template <bool r_t>
__device__ void tile_product(int K, int i0, int j0, float alpha, const uint16_t* L, int ldl, int l_rows,
                             const uint16_t* R, int ldr, int r_rows, int r_cols, float beta, const uint16_t* in,
                             uint16_t* out, int ldo, int out_rows, int out_cols, uint16_t* SL, uint16_t* SR) {
  const int Kp = (K + 15) / 16 * 16, chunks = (Kp + kChunk - 1) / kChunk;
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kChunk, w = min(kChunk, Kp - c0);
    stage_rows(SL, L, i0, l_rows, K, ldl, c0, w);
    if (r_t) {
      stage_rows(SR, R, j0, r_rows, K, ldr, c0, w);
    } else {
      for (int e = threadIdx.x; e < w * (kTile / 8); e += kThreads) {
        const int r = c0 + e / (kTile / 8), off = (e % (kTile / 8)) * 8, col = j0 + off;
        const bool ok = r < K && col < r_cols;
        cp_async16(SR + r * kLdR + off, ok ? R + static_cast<long>(r) * ldr + col : R, ok);
      }
    }
    cp_async_commit();
  }
  // Warp w: the 16 x 16 sub-tiles at rows (w / 4) * 16 and that + 32,
  // columns (w % 4) * 16, sharing the right operand's fragments.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q = lane / 8, r8 = lane % 8, l_row = lane % 16, l_col = (lane / 16) * 8;
  const int wi = (warp / 4) * 16, wj = (warp % 4) * 16;
  float acc[2][2][4] = {};
  for (int ch = 0; ch < chunks; ++ch) {
    cp_async_wait(chunks - 1 - ch);
    __syncthreads();
    const int end = min(Kp, (ch + 1) * kChunk);
#pragma unroll 4
    for (int l = ch * kChunk; l < end; l += 16) {
      uint32_t a0[4], a1[4], b[4];
      load_x4<false>(a0, SL + (wi + l_row) * kLdL + l + l_col);
      load_x4<false>(a1, SL + (wi + 32 + l_row) * kLdL + l + l_col);
      if (r_t)
        load_x4<false>(b, SR + (wj + (q / 2) * 8 + r8) * kLdL + l + (q % 2) * 8);
      else
        load_x4<true>(b, SR + (l + (q % 2) * 8 + r8) * kLdR + wj + (q / 2) * 8);
      mma16816(acc[0][0], a0, b[0], b[1]);
      mma16816(acc[0][1], a0, b[2], b[3]);
      mma16816(acc[1][0], a1, b[0], b[1]);
      mma16816(acc[1][1], a1, b[2], b[3]);
    }
  }
  // Accumulator (m16n8): this lane's pairs at row lane / 4 (+ 8), columns 2 (lane % 4), +1.
  const int g = lane / 4, c2 = 2 * (lane % 4);
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gi = i0 + wi + 32 * u + g + 8 * h, gj = j0 + wj + nb * 8 + c2;
        if (gi >= out_rows || gj >= out_cols) continue;
        const long o = static_cast<long>(gi) * ldo + gj;
        const unsigned p = beta != 0.f ? __ldcg(reinterpret_cast<const unsigned*>(in + o)) : 0u;
        const float lo = alpha * acc[u][nb][2 * h] + beta * __uint_as_float(p << 16);
        const float hi = alpha * acc[u][nb][2 * h + 1] + beta * __uint_as_float(p & 0xffff0000u);
        __stcg(reinterpret_cast<unsigned*>(out + o), bf16_pair(lo, hi));
      }
  __syncthreads();  // the staging buffers are filled again by the next product
}
#endif

template <class T>
__global__ void __launch_bounds__(kThreads) ns_cluster_kernel(const __grid_constant__ ClusterArgs a) {
#if __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  uint16_t* SL = reinterpret_cast<uint16_t*>(smem);
  uint16_t* SR = reinterpret_cast<uint16_t*>(smem + kBytesL);
  __shared__ float partial;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), blocks = static_cast<int>(cluster.num_blocks());
  const int m = blockIdx.y;
  const MuonMatrix mt = a.s.mats[m];
  // Inactive or skipped: the whole cluster leaves, nothing changes.
  if (!mt.active || a.s.stats->skip) return;
  const int k = a.k, n = a.n, ta = a.ta, tx = a.tx;
  uint16_t* X = a.X + static_cast<long>(m) * k * n;
  uint16_t* Xn = a.Xn + static_cast<long>(m) * k * n;
  uint16_t* A = a.A + static_cast<long>(m) * k * k;
  uint16_t* B = a.B + static_cast<long>(m) * k * k;
  // This block's elements: those of its X tiles (t = rank, rank + blocks),
  // each thread kPerTile of a tile, consecutive threads along the stored
  // rows. Element slot v: stored index, or -1 past the edges.
  auto element = [&](int v, int& i, int& j) {
    const int t = rank + (v / kPerTile) * blocks, el = threadIdx.x + (v % kPerTile) * kThreads;
    if (t >= ta * tx) return -1L;
    i = (t / tx) * kTile + (a.tall ? el % kTile : el / kTile);
    j = (t % tx) * kTile + (a.tall ? el / kTile : el % kTile);
    if (i >= k || j >= n) return -1L;
    return a.tall ? static_cast<long>(j) * k + i : static_cast<long>(i) * n + j;
  };
  // Momentum (momentum_kernel's arithmetic); every load issued before the
  // first store.
  const T* g = static_cast<const T*>(a.s.grad) + mt.offset;
  float* buf = a.s.momentum + mt.momentum_offset;
  const float mom = *a.s.momentum_coef, clip = static_cast<float>(a.s.stats->clip_coef);
  float gv[kPerThread], bv[kPerThread];
#pragma unroll
  for (int v = 0; v < kPerThread; ++v) {
    int i, j;
    const long e = element(v, i, j);
    gv[v] = e >= 0 ? load_f32(g, e) : 0.f;
    bv[v] = e >= 0 ? buf[e] : 0.f;
  }
  float sumsq = 0.f;
#pragma unroll
  for (int v = 0; v < kPerThread; ++v) {
    int i, j;
    const long e = element(v, i, j);
    if (e < 0) continue;
    gv[v] = bf16_to_float(float_to_bf16(momentum_element(gv[v] * clip, bv[v], mom, a.s.nesterov)));
    buf[e] = bv[v];
    sumsq += gv[v] * gv[v];
  }
  // The norm from every block's sum, in rank order (the same bits in each).
  const float mine = block_sum(sumsq);
  if (threadIdx.x == 0) partial = mine;
  cluster.sync();
  double total = 0.0;
  for (int r = 0; r < blocks; ++r) total += *cluster.map_shared_rank(&partial, r);
  // Normalised as normalise_kernel rounds it.
  const float scale = norm_scale(total, a.norm_factor, a.eps);
#pragma unroll
  for (int v = 0; v < kPerThread; ++v) {
    int i, j;
    if (element(v, i, j) >= 0) __stcg(X + static_cast<long>(i) * n + j, float_to_bf16(gv[v] * scale));
  }
  cluster.sync();  // X complete; no block reads `partial` any more
  // The iteration of core/newton_schulz.hpp, one product between barriers.
  for (int s = 0; s < a.steps; ++s) {
    const NsCoefficients c = a.c[s];
    for (int t = rank; t < ta * ta; t += blocks)  // A = X X^T
      tile_product<true>(n, (t / ta) * kTile, (t % ta) * kTile, 1.f, X, n, k, X, n, k, 0, 0.f, nullptr, A, k, k, k,
                         SL, SR);
    cluster.sync();
    for (int t = rank; t < ta * ta; t += blocks)  // B = c A A + b A
      tile_product<false>(k, (t / ta) * kTile, (t % ta) * kTile, c.c, A, k, k, A, k, k, k, c.b, A, B, k, k, k, SL, SR);
    cluster.sync();
    for (int t = rank; t < ta * tx; t += blocks)  // Xn = B X + a X
      tile_product<false>(k, (t / tx) * kTile, (t % tx) * kTile, 1.f, B, k, k, X, n, k, n, c.a, X, Xn, n, k, n, SL,
                          SR);
    cluster.sync();
    uint16_t* tmp = X;
    X = Xn;
    Xn = tmp;
  }
  // The update (update_kernel's arithmetic).
  T* p = static_cast<T*>(a.s.param) + mt.offset;
  float* w = a.s.master ? a.s.master + mt.momentum_offset : nullptr;
#pragma unroll
  for (int v = 0; v < kPerThread; ++v) {
    int i, j;
    const long e = element(v, i, j);
    if (e < 0) continue;
    const float o = bf16_to_float(__ldcg(X + static_cast<long>(i) * n + j));
    const float start = w ? master_or_param(w[e], float_to_bf16(load_f32(p, e))) : load_f32(p, e);
    const float next = update_element(start, mt.decay, mt.lr, o);
    if (w) w[e] = next;
    store_f32(p, e, next);
  }
#endif
}

int tiles_of(int64_t rows, int64_t cols) {
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  return static_cast<int>(((k + kTile - 1) / kTile) * ((n + kTile - 1) / kTile));
}

template <class T>
bool prepare(int blocks) {
  auto* f = ns_cluster_kernel<T>;
  return cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) == cudaSuccess &&
         (blocks <= 8 || cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess);
}

// The launch of `count` matrices with `blocks` per matrix (attrs outlives cfg's use).
cudaLaunchConfig_t launch_config(int blocks, int count, cudaStream_t stream, cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(blocks);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace

bool ns_cluster_shape(int64_t rows, int64_t cols) {
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  const bool fused_size = k <= kNsFusedMaxK && n <= kNsFusedMaxN;
  return !fused_size && n <= kNsClusterMaxN && k % 8 == 0 && n % 8 == 0;
}

int ns_cluster_blocks(int64_t rows, int64_t cols, int count) {
  const char* asked = std::getenv("DMUON_NS_CLUSTER");
  if (!asked || std::string(asked) != "1" || !ns_cluster_shape(rows, cols) || count < 1) return 0;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9)
    return 0;
  const int tiles = tiles_of(rows, cols);
  // One tile per block where the device takes such a cluster, else two.
  for (int blocks : {tiles, (tiles + 1) / 2}) {
    if (blocks > kMaxClusterBlocks || blocks * kMaxTilesPerBlock < tiles) continue;
    int clusters = 0;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = launch_config(blocks, count, nullptr, attr);
    if (prepare<float>(blocks) && prepare<uint16_t>(blocks) &&
        cudaOccupancyMaxActiveClusters(&clusters, ns_cluster_kernel<float>, &cfg) == cudaSuccess && clusters >= count)
      return blocks;
    cudaGetLastError();
  }
  return 0;
}

void ns_cluster_step(CudaStepState& st, const ShapeWork& w, const NsFusedStep& s,
                     const std::vector<NsCoefficients>& coeffs, float norm_factor, float eps) {
  require(w.cluster > 0 && coeffs.size() <= static_cast<std::size_t>(kMaxSteps), DMUON_ERR_INTERNAL,
          "cluster Newton-Schulz on a shape it does not fit");
  ClusterArgs a{};
  a.s = s;
  a.X = w.X;
  a.Xn = w.Xn;
  a.A = w.A;
  a.B = w.B;
  a.k = static_cast<int>(std::min(w.rows, w.cols));
  a.n = static_cast<int>(std::max(w.rows, w.cols));
  a.tall = w.rows > w.cols;
  a.steps = static_cast<int>(coeffs.size());
  a.ta = (a.k + kTile - 1) / kTile;
  a.tx = (a.n + kTile - 1) / kTile;
  a.norm_factor = norm_factor;
  a.eps = eps;
  std::copy(coeffs.begin(), coeffs.end(), a.c);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = launch_config(w.cluster, w.count, st.stream, attr);
  cudaError_t rc = w.dtype == Dtype::fp32 ? cudaLaunchKernelEx(&cfg, ns_cluster_kernel<float>, a)
                                          : cudaLaunchKernelEx(&cfg, ns_cluster_kernel<uint16_t>, a);
  cuda_check(rc, "ns_cluster_kernel");
}

}  // namespace dmuon
