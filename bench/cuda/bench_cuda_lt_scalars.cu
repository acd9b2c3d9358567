// Which ways of passing alpha and beta cuBLASLt has plans for, on the batched
// bf16 products of Newton-Schulz (fp32 accumulation, bf16 or fp32 output):
// one device scalar per call (what Gram's deferred normalisation and fused
// update use for a single matrix) against one device alpha per output row
// with a stride between the batch's matrices (what would let every matrix of
// a batch carry its own norm). Prints, per shape and mode, the number of
// heuristic candidates and the best time of those that run.
//
//   bench_cuda_lt_scalars        (no options; docs/decisions.md, "CUDA Gram on one matrix")
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

namespace {

#define CHECK(call)                                                                 \
  do {                                                                              \
    if (int rc_ = static_cast<int>(call)) {                                         \
      std::fprintf(stderr, "%s failed (%d) at line %d\n", #call, rc_, __LINE__);    \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr size_t kWorkspace = 32u << 20;

struct Product {
  long m, n, k;  // column-major D (m x n) = A (m x k) op(B)
  int batch;
  bool trans_b;
  cudaDataType_t out;
  const char* what;
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> found;
};

cublasLtMatrixLayout_t batched(cudaDataType_t type, long rows, long cols, int batch) {
  cublasLtMatrixLayout_t l = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, rows));
  const int64_t stride = rows * cols;
  CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
  CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  return l;
}

Plan plan(cublasLtHandle_t lt, const Product& p, cublasLtPointerMode_t mode) {
  Plan q;
  CHECK(cublasLtMatmulDescCreate(&q.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CHECK(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
  if (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST) {
    const int64_t stride = p.m;  // one alpha per row of each matrix's D
    CHECK(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, &stride, sizeof stride));
  }
  q.a = batched(CUDA_R_16BF, p.m, p.k, p.batch);
  q.b = p.trans_b ? batched(CUDA_R_16BF, p.n, p.k, p.batch) : batched(CUDA_R_16BF, p.k, p.n, p.batch);
  q.c = batched(p.out, p.m, p.n, p.batch);
  cublasLtMatmulPreference_t pref = nullptr;
  CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  q.found.resize(8);
  int got = 0;
  // An unsupported mode may answer with an error status instead of no candidates.
  if (cublasLtMatmulAlgoGetHeuristic(lt, q.op, q.a, q.b, q.c, q.c, pref, 8, q.found.data(), &got) != CUBLAS_STATUS_SUCCESS)
    got = 0;
  q.found.resize(static_cast<size_t>(got));
  cublasLtMatmulPreferenceDestroy(pref);
  return q;
}

}  // namespace

int main() {
  cublasLtHandle_t lt = nullptr;
  CHECK(cublasLtCreate(&lt));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK(cudaMalloc(&workspace, kWorkspace));
  const Product products[] = {
      {768, 768, 3072, 12, true, CUDA_R_16BF, "R = X X^T, 768x3072 x12"},
      {3072, 768, 768, 12, false, CUDA_R_16BF, "Q X, 768x3072 x12"},
      {3072, 768, 768, 12, false, CUDA_R_32F, "Q X into fp32, 768x3072 x12"},
      {768, 768, 768, 12, true, CUDA_R_16BF, "X X^T, 768x768 x12"},
      {768, 768, 768, 12, false, CUDA_R_32F, "B X into fp32, 768x768 x12"},
      {256, 256, 256, 3, false, CUDA_R_16BF, "B X, 256x256 x3"},
  };
  std::printf("%-30s %-28s %10s %10s\n", "product", "alpha and beta", "candidates", "best us");
  for (const Product& p : products) {
    const long elements = std::max({p.m * p.k, p.n * p.k, p.m * p.n}) * p.batch;
    void *A = nullptr, *B = nullptr, *C = nullptr;
    float *scalars = nullptr, *rows = nullptr;
    CHECK(cudaMalloc(&A, 2 * elements));
    CHECK(cudaMalloc(&B, 2 * elements));
    CHECK(cudaMalloc(&C, 4 * elements));
    // Random operands: products of zeros draw less power and run faster
    // than the iteration's do (78.6 against 117.6 us for Q X into fp32).
    std::vector<uint16_t> noise(static_cast<size_t>(elements));
    std::srand(1);
    // bf16 bits of magnitudes in [2^-7, 2^-3), every other one negative.
    for (uint16_t& v : noise) v = static_cast<uint16_t>(0x3c00 + std::rand() % 0x200);
    for (size_t i = 0; i < noise.size(); i += 2) noise[i] |= 0x8000;
    CHECK(cudaMemcpy(A, noise.data(), 2 * elements, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(B, noise.data(), 2 * elements, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(C, 0, 4 * elements));
    const float one[2] = {1.f, 1.f};  // alpha and beta: the output is read and written, as in the update
    CHECK(cudaMalloc(&scalars, sizeof one));
    CHECK(cudaMemcpy(scalars, one, sizeof one, cudaMemcpyHostToDevice));
    const std::vector<float> row_alphas(static_cast<size_t>(p.m * p.batch), 1.f);
    CHECK(cudaMalloc(&rows, sizeof(float) * row_alphas.size()));
    CHECK(cudaMemcpy(rows, row_alphas.data(), sizeof(float) * row_alphas.size(), cudaMemcpyHostToDevice));
    const float host_beta = 1.f;
    for (cublasLtPointerMode_t mode : {CUBLASLT_POINTER_MODE_DEVICE, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST}) {
      const bool per_row = mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
      Plan q = plan(lt, p, mode);
      const void* alpha = per_row ? static_cast<const void*>(rows) : scalars;
      const void* beta = per_row ? static_cast<const void*>(&host_beta) : scalars + 1;
      float best = -1.f;
      for (const cublasLtMatmulHeuristicResult_t& h : q.found) {
        auto run = [&] {
          return cublasLtMatmul(lt, q.op, alpha, A, q.a, B, q.b, beta, C, q.c, C, q.c, &h.algo, workspace, kWorkspace,
                                stream);
        };
        if (run() != CUBLAS_STATUS_SUCCESS) continue;
        cudaEvent_t t0, t1;
        CHECK(cudaEventCreate(&t0));
        CHECK(cudaEventCreate(&t1));
        CHECK(cudaEventRecord(t0, stream));
        const int reps = 50;
        for (int r = 0; r < reps; ++r) CHECK(run());
        CHECK(cudaEventRecord(t1, stream));
        CHECK(cudaEventSynchronize(t1));
        float ms = 0.f;
        CHECK(cudaEventElapsedTime(&ms, t0, t1));
        const float us = 1000.f * ms / reps;
        best = best < 0.f ? us : std::min(best, us);
        cudaEventDestroy(t0);
        cudaEventDestroy(t1);
      }
      std::printf("%-30s %-28s %10zu %10.1f\n", p.what,
                  per_row ? "alpha per row (device), beta" : "device scalars", q.found.size(), best);
      cublasLtMatmulDescDestroy(q.op);
      cublasLtMatrixLayoutDestroy(q.a);
      cublasLtMatrixLayoutDestroy(q.b);
      cublasLtMatrixLayoutDestroy(q.c);
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(scalars);
    cudaFree(rows);
  }
  cudaFree(workspace);
  cublasLtDestroy(lt);
  return 0;
}
