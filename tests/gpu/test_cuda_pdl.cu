// Programmatic edges (backends/cuda/cuda_programmatic_edges.hpp): a kernel whose
// incoming edge is programmatic may launch while its predecessor still runs,
// so it is safe only if its own code waits before reading. The probe: a writer
// that lets its dependents launch at once and writes only after idling 20 us,
// then a reader, once with a plain and once with a programmatic edge, from
// zeroed buffers. A reader that does not wait reads the zeros (so the probe
// can see a race); the cuBLAS products of Newton-Schulz's shapes must read the
// written values, and their kernels must be among those the library makes
// programmatic edges into.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_programmatic_edges.hpp"

namespace {

__global__ void late_writer_kernel(uint16_t* dst, const uint16_t* src, int64_t n, unsigned long long idle_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < idle_ns);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void copy_without_wait_kernel(uint16_t* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void fill_kernel(uint16_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint16_t>(0x3c00u + (i * 2654435761u >> 20) % 0x200u);  // bf16 in [0.0078, 0.0156)
}

constexpr int64_t kElems = 4096LL * 4096;

class ProgrammaticEdges : public ::testing::Test {
 protected:
  void SetUp() override {
    int dev = 0, major = 0;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
    if (major < 9) GTEST_SKIP() << "programmatic dependent launch needs compute capability 9.0";
    ASSERT_EQ(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess);
    for (void** p : {&src_, &in_, &out_}) ASSERT_EQ(cudaMalloc(p, 2 * kElems), cudaSuccess);
    fill_kernel<<<256, 256, 0, s_>>>(static_cast<uint16_t*>(src_), kElems);
    ASSERT_EQ(cublasCreate(&h_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetStream(h_, s_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (h_) cublasDestroy(h_);
    for (void* p : {src_, in_, out_})
      if (p) cudaFree(p);
    if (s_) cudaStreamDestroy(s_);
  }

  // Runs writer -> reader (`reader` enqueues on the stream, reading in_ and
  // writing out_) from zeroed buffers, with a plain or a programmatic edge;
  // returns out_'s first `out_elems` elements and the reader's kernel names.
  std::vector<uint16_t> run(int64_t in_elems, int64_t out_elems, const std::function<void(cudaStream_t)>& reader,
                            bool programmatic, std::vector<std::string>* names) {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    late_writer_kernel<<<2 * sms_, 256, 0, s_>>>(static_cast<uint16_t*>(in_), static_cast<const uint16_t*>(src_),
                                                  in_elems, 20000ull);
    reader(s_);
    EXPECT_EQ(cudaStreamEndCapture(s_, &g), cudaSuccess);
    if (programmatic)
      for (const dmuon::GraphEdge& e : dmuon::make_edges_programmatic(g, [](const std::string&) { return true; }))
        if (names) names->push_back(dmuon::kernel_name(e.to));
    cudaGraphExec_t e = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(in_, 0, 2 * kElems, s_), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(out_, 0, 2 * kElems, s_), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(e, s_), cudaSuccess);
    std::vector<uint16_t> got(out_elems);
    EXPECT_EQ(cudaMemcpyAsync(got.data(), out_, 2 * out_elems, cudaMemcpyDeviceToHost, s_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
    cudaGraphExecDestroy(e);
    cudaGraphDestroy(g);
    return got;
  }

  int sms_ = 0;
  cudaStream_t s_ = nullptr;
  void *src_ = nullptr, *in_ = nullptr, *out_ = nullptr;
  cublasHandle_t h_ = nullptr;
};

TEST_F(ProgrammaticEdges, TheProbeSeesAReaderThatDoesNotWait) {
  const int64_t n = 768LL * 3072;
  auto copy = [&](cudaStream_t s) {
    copy_without_wait_kernel<<<2 * sms_, 256, 0, s>>>(static_cast<uint16_t*>(out_), static_cast<const uint16_t*>(in_), n);
  };
  std::vector<std::string> names;
  const std::vector<uint16_t> plain = run(n, n, copy, false, nullptr);
  const std::vector<uint16_t> early = run(n, n, copy, true, &names);
  ASSERT_EQ(names.size(), 1u) << "the edge writer -> copy was not made programmatic";
  EXPECT_NE(plain, std::vector<uint16_t>(n, 0));
  EXPECT_NE(early, plain) << "the reader that does not wait read the written values: the probe cannot see a race";
}

// Row-major C (m x n) = A (m x k) B (k x n), `batch` of them, A the written
// input; with `a_transposed`, A is read as the transpose of a k x m matrix
// (the X Xt product's operand).
struct Product {
  int m, n, k, batch;
  bool a_transposed;
  // Whether the product must follow the writer directly. Before a large
  // product cuBLAS may clear its workspace (a memset node between the two),
  // so that no edge between kernels is left to make programmatic: safe, and
  // reported, but nothing to probe.
  bool direct;
};

TEST_F(ProgrammaticEdges, CublasProductsWaitForTheirPredecessor) {
  const std::vector<Product> products = {{256, 256, 256, 3, false, true},    {768, 768, 768, 1, false, true},
                                         {768, 768, 3072, 1, true, true},     {768, 3072, 768, 1, false, true},
                                         {2048, 2048, 2048, 1, false, false}, {4096, 4096, 4096, 1, false, false}};
  const float one = 1.0f, zero = 0.0f;
  for (const Product& p : products) {
    SCOPED_TRACE(std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) + " x" +
                 std::to_string(p.batch));
    const int64_t in_elems = int64_t(p.m) * p.k * p.batch, out_elems = int64_t(p.m) * p.n * p.batch;
    auto product = [&](cudaStream_t) {
      // Column-major: C^T (n x m) = B^T (n x k) A^T (k x m); B is src_.
      EXPECT_EQ(cublasGemmStridedBatchedEx(h_, CUBLAS_OP_N, p.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, p.n, p.m, p.k,
                                           &one, src_, CUDA_R_16BF, p.n, int64_t(p.k) * p.n, in_, CUDA_R_16BF,
                                           p.a_transposed ? p.m : p.k, int64_t(p.m) * p.k, &zero, out_, CUDA_R_16BF,
                                           p.n, int64_t(p.m) * p.n, p.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
    };
    std::vector<std::string> names;
    const std::vector<uint16_t> plain = run(in_elems, out_elems, product, false, nullptr);
    const std::vector<uint16_t> early = run(in_elems, out_elems, product, true, &names);
    EXPECT_NE(plain, std::vector<uint16_t>(out_elems, 0));
    EXPECT_EQ(early, plain) << "a cuBLAS product read its input before its predecessor wrote it";
    if (names.empty()) {
      EXPECT_FALSE(p.direct) << "no edge between the writer and the product's kernel was made programmatic";
      std::printf("%dx%dx%d x%d: a node between writer and product, nothing to probe\n", p.m, p.n, p.k, p.batch);
    }
    for (const std::string& name : names) {
      std::printf("%dx%dx%d x%d: %s\n", p.m, p.n, p.k, p.batch, name.c_str());
      EXPECT_TRUE(dmuon::waits_for_prerequisites(name, dmuon::ProgrammaticEdges::into_dmuon_and_cublas_kernels))
          << name << ": not among the kernels the library makes programmatic edges into";
    }
  }
}

}  // namespace
