// Which ways of passing alpha and beta cuBLASLt has plans for, on the batched
// bf16 products of Newton-Schulz (fp32 accumulation, bf16 or fp32 output):
// one device scalar per call (what Gram's deferred normalisation and fused
// update use for a single matrix) against one device alpha per output row
// with a stride between the batch's matrices (what would let every matrix of
// a batch carry its own norm), and device scalars with every operand a
// pointer array (what would let a batch's last product update parameters that
// are not at one stride). Prints, per shape and mode, the candidates the
// library's own query offers (lt_candidates) and the best time of those.
//
//   bench_cuda_lt_scalars        (no options; docs/decisions.md, "CUDA Gram on one matrix")
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "bench_common.cuh"

namespace {

using dmuon::cublas_check;

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
  std::vector<cublasLtMatmulAlgo_t> algos;
  ~Plan() {
    cublasLtMatmulDescDestroy(op);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
  }
};

// How the probe passes alpha, beta and the batch's matrices.
enum class Mode { device_scalars, alpha_per_row, pointer_arrays };

void layout(cublasLtMatrixLayout_t& l, long rows, long cols, int batch, bool pointers,
            cudaDataType_t type = CUDA_R_16BF) {
  const int64_t stride = rows * cols;
  const uint32_t by_pointer = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
  if (pointers)
    dmuon::lt_batched_layout(l, rows, cols, rows, batch, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, by_pointer, "", type);
  else
    dmuon::lt_batched_layout(l, rows, cols, rows, batch, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, "", type);
}

void plan(cublasLtHandle_t lt, const Product& p, Mode how, Plan& q) {
  const cublasLtPointerMode_t mode =
      how == Mode::alpha_per_row ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST : CUBLASLT_POINTER_MODE_DEVICE;
  const bool pointers = how == Mode::pointer_arrays;
  cublas_check(cublasLtMatmulDescCreate(&q.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublas_check(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  cublas_check(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
               "POINTER_MODE");
  if (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST) {
    const int64_t stride = p.m;  // one alpha per row of each matrix's D
    cublas_check(cublasLtMatmulDescSetAttribute(q.op, CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, &stride,
                                                sizeof stride),
                 "ALPHA_VECTOR_BATCH_STRIDE");
  }
  layout(q.a, p.m, p.k, p.batch, pointers);
  if (p.trans_b)
    layout(q.b, p.n, p.k, p.batch, pointers);
  else
    layout(q.b, p.k, p.n, p.batch, pointers);
  layout(q.c, p.m, p.n, p.batch, pointers, p.out);
  cublasLtMatmulPreference_t pref = nullptr;
  cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  q.algos = dmuon::lt_candidates(lt, q.op, q.a, q.b, q.c, pref);
  cublasLtMatmulPreferenceDestroy(pref);
}

void run() {
  cublasLtHandle_t lt = nullptr;
  cublas_check(cublasLtCreate(&lt), "cublasLtCreate");
  cudaStream_t stream = nullptr;
  bench::cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  void* workspace = nullptr;
  bench::cuda(cudaMalloc(&workspace, kWorkspace), "cudaMalloc");
  const Product products[] = {
      {768, 768, 3072, 12, true, CUDA_R_16BF, "R = X X^T, 768x3072 x12"},
      {3072, 768, 768, 12, false, CUDA_R_16BF, "Q X, 768x3072 x12"},
      {3072, 768, 768, 12, false, CUDA_R_32F, "Q X into fp32, 768x3072 x12"},
      {768, 768, 768, 12, true, CUDA_R_16BF, "X X^T, 768x768 x12"},
      {768, 768, 768, 12, false, CUDA_R_32F, "B X into fp32, 768x768 x12"},
      {256, 256, 256, 3, false, CUDA_R_16BF, "B X, 256x256 x3"},
  };
  std::printf("%-30s %-30s %10s %10s\n", "product", "alpha and beta", "candidates", "best us");
  for (const Product& p : products) {
    const long elements = std::max({p.m * p.k, p.n * p.k, p.m * p.n}) * p.batch;
    void *A = nullptr, *B = nullptr, *C = nullptr;
    float *scalars = nullptr, *rows = nullptr;
    bench::cuda(cudaMalloc(&A, 2 * elements), "cudaMalloc");
    bench::cuda(cudaMalloc(&B, 2 * elements), "cudaMalloc");
    bench::cuda(cudaMalloc(&C, 4 * elements), "cudaMalloc");
    // Random operands: products of zeros draw less power and run faster
    // than the iteration's do (78.6 against 117.6 us for Q X into fp32).
    bench::fill(A, elements, DMUON_DTYPE_BF16, 1, 0.1f, stream);
    bench::fill(B, elements, DMUON_DTYPE_BF16, 2, 0.1f, stream);
    bench::cuda(cudaMemsetAsync(C, 0, 4 * elements, stream), "cudaMemsetAsync");
    const float one[2] = {1.f, 1.f};  // alpha and beta: the output is read and written, as in the update
    bench::cuda(cudaMalloc(&scalars, sizeof one), "cudaMalloc");
    bench::cuda(cudaMemcpy(scalars, one, sizeof one, cudaMemcpyHostToDevice), "cudaMemcpy");
    const std::vector<float> row_alphas(static_cast<size_t>(p.m * p.batch), 1.f);
    bench::cuda(cudaMalloc(&rows, sizeof(float) * row_alphas.size()), "cudaMalloc");
    bench::cuda(cudaMemcpy(rows, row_alphas.data(), sizeof(float) * row_alphas.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy");
    const float host_beta = 1.f;
    // The same matrices as device arrays of pointers, one per matrix of the batch.
    void** arrays = nullptr;
    {
      const size_t out_bytes = p.out == CUDA_R_32F ? 4 : 2;
      std::vector<void*> host(3 * static_cast<size_t>(p.batch));
      for (int i = 0; i < p.batch; ++i) {
        host[i] = static_cast<char*>(A) + 2 * p.m * p.k * i;
        host[p.batch + i] = static_cast<char*>(B) + 2 * p.n * p.k * i;
        host[2 * p.batch + i] = static_cast<char*>(C) + out_bytes * p.m * p.n * i;
      }
      bench::cuda(cudaMalloc(&arrays, sizeof(void*) * host.size()), "cudaMalloc");
      bench::cuda(cudaMemcpy(arrays, host.data(), sizeof(void*) * host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    for (Mode how : {Mode::device_scalars, Mode::alpha_per_row, Mode::pointer_arrays}) {
      const bool per_row = how == Mode::alpha_per_row, pointers = how == Mode::pointer_arrays;
      Plan q;
      plan(lt, p, how, q);
      const void* alpha = per_row ? static_cast<const void*>(rows) : scalars;
      const void* beta = per_row ? static_cast<const void*>(&host_beta) : scalars + 1;
      const void* a_in = pointers ? static_cast<const void*>(arrays) : A;
      const void* b_in = pointers ? static_cast<const void*>(arrays + p.batch) : B;
      void* c_io = pointers ? static_cast<void*>(arrays + 2 * p.batch) : C;
      float best = -1.f;
      for (const cublasLtMatmulAlgo_t& algo : q.algos) {
        auto matmul = [&] {
          return cublasLtMatmul(lt, q.op, alpha, a_in, q.a, b_in, q.b, beta, c_io, q.c, c_io, q.c, &algo, workspace,
                                kWorkspace, stream);
        };
        if (matmul() != CUBLAS_STATUS_SUCCESS) continue;
        cudaEvent_t t0, t1;
        bench::cuda(cudaEventCreate(&t0), "cudaEventCreate");
        bench::cuda(cudaEventCreate(&t1), "cudaEventCreate");
        bench::cuda(cudaEventRecord(t0, stream), "cudaEventRecord");
        const int reps = 50;
        for (int r = 0; r < reps; ++r) cublas_check(matmul(), "cublasLtMatmul");
        bench::cuda(cudaEventRecord(t1, stream), "cudaEventRecord");
        bench::cuda(cudaEventSynchronize(t1), "cudaEventSynchronize");
        float ms = 0.f;
        bench::cuda(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
        const float us = 1000.f * ms / reps;
        best = best < 0.f ? us : std::min(best, us);
        cudaEventDestroy(t0);
        cudaEventDestroy(t1);
      }
      const char* name = per_row ? "alpha per row (device), beta" : pointers ? "pointer arrays, device scalars"
                                                                            : "device scalars";
      std::printf("%-30s %-30s %10zu %10.1f\n", p.what, name, q.algos.size(), best);
    }
    cudaFree(arrays);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(scalars);
    cudaFree(rows);
  }
  cudaFree(workspace);
  cublasLtDestroy(lt);
}

}  // namespace

int main() {
  try {
    run();
  } catch (const std::exception& e) {  // cublas_check's dmuon::Error
    std::fprintf(stderr, "bench_cuda_lt_scalars: %s\n", e.what());
    return 1;
  }
  return 0;
}
