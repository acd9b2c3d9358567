#include "backends/cuda/cuda_ns_symmetric.hpp"
#include "backends/cuda/cuda_pdl.cuh"

#include <algorithm>
#include <vector>

namespace dmuon {

namespace {

constexpr int kTile = 32, kTileRows = 8;

// One k x k matrix per blockIdx.z, seen as memory: element (s, f) at s*k + f.
// The product wrote the blocks where f's block >= s's block (the lower
// triangle of the column-major view, the one cuBLAS computes); this fills the
// blocks where f's block < s's block from their transposes, through a
// shared-memory tile so that reads and writes both stay coalesced. Tiles with
// nothing to fill return at once. A plain copy: deterministic.
__global__ void mirror_blocks_kernel(uint16_t* M, int64_t k, int64_t bs) {
  await_prerequisite_kernels();
  __shared__ uint16_t tile[kTile][kTile + 1];
  uint16_t* m = M + blockIdx.z * k * k;
  const int64_t s0 = int64_t(blockIdx.y) * kTile, f0 = int64_t(blockIdx.x) * kTile;
  const int64_t s_last = s0 + kTile - 1 < k ? s0 + kTile - 1 : k - 1;
  if (f0 / bs >= s_last / bs) return;
  // Source: rows f0.. and columns s0.. of the memory view.
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t ss = f0 + j, ff = s0 + threadIdx.x;
    if (ss < k && ff < k) tile[j][threadIdx.x] = m[ss * k + ff];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t s = s0 + j, f = f0 + threadIdx.x;
    if (s < k && f < k && f / bs < s / bs) m[s * k + f] = tile[threadIdx.x][j];
  }
}

// One cuBLASLt matmul over pointer arrays, made once per shape.
struct SymPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's candidates, best first
  bool usable = false;  // false: cuBLASLt offered nothing (or refused once): cublasGemmBatchedEx
};

// Pointer arrays of one product over the lower blocks of every matrix of the
// batch: four arrays of `batch` entries (P's row block I, P's row block J,
// the beta input block, the output block).
enum : int { kArrI = 0, kArrJ = 1, kArrCin = 2, kArrD = 3, kNumArrays = 4 };

struct SymSet {
  const uint16_t* P = nullptr;     // the operand: X, Xn or A
  const uint16_t* c_in = nullptr;  // beta's input (A for the square), null for a Gram product
  uint16_t* D = nullptr;           // the output: A or B
  bool row_major = true;           // P's frame in the engine
  long K = 0;                      // P is k x K
  void** arrays = nullptr;         // device, kNumArrays * batch entries
  SymPlan plan;
};

}  // namespace

struct SymShape {
  int p = 0;
  long k = 0, bs = 0;
  int count = 0, batch = 0;  // matrices, and products (count * p(p+1)/2)
  void* dev = nullptr;       // every pointer array, one allocation
  SymSet sets[3];            // X X^T into A, Xn Xn^T into A, A A (+ A) into B
};

void SymShapeDeleter::operator()(SymShape* s) const noexcept {
  if (!s) return;
  for (SymSet& set : s->sets) {
    SymPlan& p = set.plan;
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
  cudaFree(s->dev);
  delete s;
}

bool sym_blocks_possible(long k, int p) {
  if (p < 2 || k % p != 0) return false;
  const long bs = k / p;
  return bs % 8 == 0 && bs >= 16;
}

namespace {

void make_plan(cublasLtHandle_t lt, SymPlan& pl, bool row_major, long bs, long K, long k, int batch) {
  // Row-major P (k x K, ld K) is P^T column-major: block I is columns I*bs..
  // of that K x k matrix, used transposed. Column-major P (ld k): block I is
  // rows I*bs.., used as is, the second operand transposed.
  const cublasOperation_t oa = row_major ? CUBLAS_OP_T : CUBLAS_OP_N, ob = row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublas_check(cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate (symmetric)");
  cublas_check(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa),
               "cublasLtMatmulDescSetAttribute (symmetric)");
  cublas_check(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob),
               "cublasLtMatmulDescSetAttribute (symmetric)");
  auto layout = [&](cublasLtMatrixLayout_t& l, long rows, long cols, long ld) {
    const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    lt_batched_layout(l, rows, cols, ld, batch, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, mode, " (symmetric)");
  };
  if (row_major) {
    layout(pl.a, K, bs, K);
    layout(pl.b, K, bs, K);
  } else {
    layout(pl.a, bs, K, k);
    layout(pl.b, bs, K, k);
  }
  layout(pl.c, bs, bs, k);
  cublasLtMatmulPreference_t pref = nullptr;
  cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate (symmetric)");
  const uint64_t ws = kCublasWorkspace;
  // Block pointers are 16-byte aligned (sym_blocks_possible), not 256 as the
  // heuristic assumes by default when it cannot see the pointers.
  const uint32_t align = 16;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (cublasLtMatmulPreferenceAttributes_t a :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof align);
  pl.algos = lt_candidates(lt, pl.op, pl.a, pl.b, pl.c, pref);
  cublasLtMatmulPreferenceDestroy(pref);
  pl.usable = !pl.algos.empty();
  if (pl.usable) pl.algo = pl.algos[0];
}

}  // namespace

SymShapePtr make_sym_shape(CudaStepState& st, const ShapeWork& w, int p) {
  const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
  require(sym_blocks_possible(k, p), DMUON_ERR_INTERNAL, "symmetric products: block count does not fit the shape");
  SymShapePtr s(new SymShape);
  s->p = p;
  s->k = k;
  s->bs = k / p;
  s->count = w.count;
  const int nb = p * (p + 1) / 2;
  s->batch = w.count * nb;
  const bool wide = w.rows <= w.cols;  // X row-major; a tall matrix's X is its buffer read column-major
  s->sets[0] = SymSet{w.X, nullptr, w.A, wide, n, nullptr, {}};
  s->sets[1] = SymSet{w.Xn, nullptr, w.A, wide, n, nullptr, {}};
  s->sets[2] = SymSet{w.A, w.A, w.B, true, k, nullptr, {}};  // A is symmetric: either frame reads it right
  const std::size_t per_set = std::size_t(kNumArrays) * s->batch;
  std::vector<const void*> host(3 * per_set);
  const long bs = s->bs;
  for (int si = 0; si < 3; ++si) {
    const SymSet& set = s->sets[si];
    const void** a = host.data() + si * per_set;
    for (int b = 0; b < w.count; ++b) {
      int t = 0;
      for (long I = 0; I < p; ++I)
        for (long J = 0; J <= I; ++J, ++t) {
          const std::size_t idx = std::size_t(b) * nb + t;
          const uint16_t* base = set.P + std::size_t(b) * k * set.K;
          a[kArrI * s->batch + idx] = base + (set.row_major ? I * bs * set.K : I * bs);
          a[kArrJ * s->batch + idx] = base + (set.row_major ? J * bs * set.K : J * bs);
          // Block (I, J) of the column-major k x k output: rows I*bs.., columns J*bs..
          const std::size_t off = std::size_t(b) * k * k + I * bs + J * bs * k;
          a[kArrCin * s->batch + idx] = (set.c_in ? set.c_in : set.D) + off;
          a[kArrD * s->batch + idx] = set.D + off;
        }
    }
  }
  const std::size_t bytes = host.size() * sizeof(void*);
  cuda_check(cudaMalloc(&s->dev, bytes), "cudaMalloc (symmetric product pointer arrays)");
  // Pageable source: the copy is staged before this returns, and ordered
  // before every product enqueued on the stream after it.
  cuda_check(cudaMemcpyAsync(s->dev, host.data(), bytes, cudaMemcpyHostToDevice, st.stream),
             "cudaMemcpyAsync (symmetric product pointer arrays)");
  for (int si = 0; si < 3; ++si) {
    SymSet& set = s->sets[si];
    set.arrays = static_cast<void**>(s->dev) + si * per_set;
    make_plan(st.lt, set.plan, set.row_major, bs, set.K, k, s->batch);
  }
  return s;
}

namespace {
SymSet* find_set(SymShape& s, const uint16_t* P, const uint16_t* c_in, const uint16_t* C) {
  for (SymSet& set : s.sets)
    if (set.P == P && set.D == C && set.c_in == c_in) return &set;
  return nullptr;
}
}  // namespace

bool sym_knows(const SymShape& s, const uint16_t* P, const uint16_t* c_in, const uint16_t* C) {
  return find_set(const_cast<SymShape&>(s), P, c_in, C) != nullptr;
}

void sym_product(CudaStepState& st, SymShape& s, const uint16_t* P, float alpha, float beta, const uint16_t* c_in,
                 uint16_t* C, int algo, NsGemmCall* record) {
  SymSet* set = find_set(s, P, c_in, C);
  require(set != nullptr, DMUON_ERR_INTERNAL, "symmetric product of an unknown operand");
  void** a = set->arrays;
  void** ai = a + kArrI * s.batch;
  void** aj = a + kArrJ * s.batch;
  void** ac = a + (set->c_in ? kArrCin : kArrD) * s.batch;
  void** ad = a + kArrD * s.batch;
  bool done = false;
  if (set->plan.usable) {
    SymPlan& pl = set->plan;
    pl.algo = algo_at(pl.algos, algo);
    if (record) *record = NsGemmCall{true, pl.op, pl.a, pl.b, pl.c, ai, aj, ac, ad, alpha, beta, &pl.algos};
    const cublasStatus_t rc = cublasLtMatmul(st.lt, pl.op, &alpha, ai, pl.a, aj, pl.b, &beta, ac, pl.c, ad, pl.c, &pl.algo,
                                             st.cublas_workspace, kCublasWorkspace, st.stream);
    // A refusal (checked before anything is enqueued) sends this product to
    // cuBLAS for good; the first call of a shape is eager, so eager and
    // replay agree on the kernel from then on.
    done = rc == CUBLAS_STATUS_SUCCESS;
    if (!done) pl.usable = false;
  }
  if (!done) {
    // cublasGemmBatchedEx writes in place (C = D): copy the beta input first.
    if (set->c_in && beta != 0.f && set->c_in != set->D)
      cuda_check(cudaMemcpyAsync(set->D, set->c_in, sizeof(uint16_t) * s.k * s.k * s.count, cudaMemcpyDeviceToDevice,
                                 st.stream),
                 "cudaMemcpyAsync (symmetric product)");
    const bool rm = set->row_major;
    cublas_check(cublasGemmBatchedEx(st.cublas, rm ? CUBLAS_OP_T : CUBLAS_OP_N, rm ? CUBLAS_OP_N : CUBLAS_OP_T, int(s.bs),
                                     int(s.bs), int(set->K), &alpha, ai, CUDA_R_16BF, int(rm ? set->K : s.k), aj,
                                     CUDA_R_16BF, int(rm ? set->K : s.k), &beta, ad, CUDA_R_16BF, int(s.k), s.batch,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmBatchedEx (symmetric product)");
  }
  const unsigned tiles = static_cast<unsigned>((s.k + kTile - 1) / kTile);
  mirror_blocks_kernel<<<dim3(tiles, tiles, static_cast<unsigned>(s.count)), dim3(kTile, kTileRows), 0, st.stream>>>(
      set->D, s.k, s.bs);
  launch_check("mirror_blocks_kernel");
}

}  // namespace dmuon
