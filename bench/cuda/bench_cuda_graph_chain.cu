// What one dependent node of a CUDA graph costs on the device, apart from
// its work: the lower bound of a step made of many small kernels in a row,
// such as the 4x256 MLP's (momentum, normalisation, fifteen 256 x 256
// products, update). Each variant is a graph of a chain of n kernels, each
// waiting for the one before; device time per replay is timed with events
// over `replays` replays queued behind a held stream, best of `rounds`
// rounds, at n and 2n nodes: (t(2n) - t(n)) / n is the cost of one more
// node, free of the graph launch's own. Variants:
//   empty_one      empty kernels of one block of 32 threads;
//   empty_grid     empty kernels of 2 blocks per multiprocessor, 256 threads
//                  (the grid of dmuon's passes);
//   empty_grid_pdl the same, launched with programmatic stream serialization
//                  (Hopper's programmatic dependent launch): each kernel lets
//                  its successor launch at once and waits for its predecessor
//                  in the device code, so launch and wait overlap;
//   gemm256        cuBLAS bf16 products 256 x 256 x 256, three in a strided
//                  batch, fp32 accumulation: the 4x256 MLP's products;
//   gemm256_pdl    the same graph with every kernel-to-kernel edge made
//                  programmatic after capture. Safe only if cuBLAS's kernels
//                  wait for their predecessor in their device code, so the
//                  bench also replays both graphs once from the same inputs
//                  and prints whether the outputs agree bit for bit
//                  (chain_gemm256_pdl_same: 1 or 0). tests/gpu/test_cuda_pdl.cu
//                  is the stronger check, a race forced by a late writer.
#include <cublas_v2.h>

#include "backends/cuda/cuda_programmatic_edges.hpp"
#include "bench_common.cuh"

namespace {

__global__ void empty_kernel() {}

__global__ void empty_pdl_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

using Enqueue = std::function<void(cudaStream_t)>;

// Every kernel-to-kernel edge made programmatic, whatever the kernels.
void make_edges_programmatic(cudaGraph_t g) {
  dmuon::make_edges_programmatic(g, [](const std::string&) { return true; });
}

cudaGraphExec_t capture(int nodes, const Enqueue& one, cudaStream_t s, bool programmatic = false) {
  cudaGraph_t g = nullptr;
  bench::cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < nodes; ++i) one(s);
  bench::cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  if (programmatic) make_edges_programmatic(g);
  cudaGraphExec_t e = nullptr;
  bench::cuda(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  return e;
}

void measure(const char* name, int nodes, const Enqueue& one, cudaStream_t s, bool programmatic = false) {
  cudaGraphExec_t e1 = capture(nodes, one, s, programmatic), e2 = capture(2 * nodes, one, s, programmatic);
  for (cudaGraphExec_t e : {e1, e2})
    for (int i = 0; i < 3; ++i) bench::cuda(cudaGraphLaunch(e, s), "cudaGraphLaunch");
  auto replay = [s](cudaGraphExec_t e) {
    return bench::held_device_us(s, [e, s] { bench::cuda(cudaGraphLaunch(e, s), "cudaGraphLaunch"); }, 50, 5);
  };
  const double t1 = replay(e1), t2 = replay(e2);
  std::printf("RESULT chain_%s_nodes %d\n", name, nodes);
  std::printf("RESULT chain_%s_replay_us %.3f\n", name, t1);
  std::printf("RESULT chain_%s_node_us %.3f\n", name, (t2 - t1) / nodes);
  cudaGraphExecDestroy(e1);
  cudaGraphExecDestroy(e2);
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_graph_chain: device cost of one dependent graph node");
  int nodes = 20;
  desc.add_options()("help", "this text")("nodes", po::value(&nodes)->default_value(20), "nodes of the shorter chain");
  if (!bench::parse_options(argc, argv, desc)) return 0;
  cudaStream_t s = nullptr;
  bench::cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  int sms = 0;
  bench::cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");

  measure("empty_one", nodes, [](cudaStream_t st) { empty_kernel<<<1, 32, 0, st>>>(); }, s);
  measure("empty_grid", nodes, [sms](cudaStream_t st) { empty_kernel<<<2 * sms, 256, 0, st>>>(); }, s);
  measure(
      "empty_grid_pdl", nodes,
      [sms](cudaStream_t st) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(2 * sms);
        cfg.blockDim = dim3(256);
        cfg.stream = st;
        cudaLaunchAttribute attr = {};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        bench::cuda(cudaLaunchKernelEx(&cfg, empty_pdl_kernel), "cudaLaunchKernelEx");
      },
      s);

  // The MLP's products: each reads the one before's output (two buffers in turn).
  constexpr int kN = 256, kBatch = 3;
  const long long stride = static_cast<long long>(kN) * kN;
  void* buf[2] = {nullptr, nullptr};
  void* w = nullptr;
  for (void** p : {&buf[0], &buf[1], &w}) bench::cuda(cudaMalloc(p, 2 * stride * kBatch), "cudaMalloc");
  for (void* p : {buf[0], buf[1], w}) bench::fill(p, stride * kBatch, DMUON_DTYPE_BF16, 7, 0.05f, s);
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  int turn = 0;
  float alpha = 1.0f / kN;
  const float beta = 0.0f;
  auto product = [&](cudaStream_t) {
    const cublasStatus_t rc = cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &alpha, buf[turn], CUDA_R_16BF, kN, stride, w, CUDA_R_16BF, kN,
        stride, &beta, buf[1 - turn], CUDA_R_16BF, kN, stride, kBatch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (rc != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmStridedBatchedEx failed (%d)\n", static_cast<int>(rc));
      std::exit(1);
    }
    turn = 1 - turn;
  };
  measure("gemm256", nodes, product, s);
  measure("gemm256_pdl", nodes, product, s, true);

  // The same chain from the same inputs, with and without programmatic edges.
  // alpha 2 keeps the values near their scale over the chain (each product of
  // uniform [-0.05, 0.05] weights scales a row by about 0.46), so a product
  // that read its input before its predecessor wrote it changes the output.
  alpha = 2.0f;
  const size_t bytes = 2 * stride * kBatch;
  std::vector<std::vector<char>> out(2, std::vector<char>(bytes));
  for (int pdl = 0; pdl < 2; ++pdl) {
    turn = 0;
    cudaGraphExec_t e = capture(nodes, product, s, pdl == 1);
    bench::fill(buf[0], stride * kBatch, DMUON_DTYPE_BF16, 7, 0.05f, s);
    bench::cuda(cudaGraphLaunch(e, s), "cudaGraphLaunch");
    bench::cuda(cudaMemcpyAsync(out[pdl].data(), buf[nodes % 2], bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    bench::cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    cudaGraphExecDestroy(e);
  }
  std::printf("RESULT chain_gemm256_pdl_same %d\n", out[0] == out[1] ? 1 : 0);

  cublasDestroy(h);
  for (void* p : {buf[0], buf[1], w}) cudaFree(p);
  cudaStreamDestroy(s);
  return 0;
}
