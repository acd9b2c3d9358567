// Newton-Schulz per shape: one Muon step of `count` same-shape bf16 matrices
// (momentum, normalisation, 5 quintic iterations in bf16 through cuBLAS,
// update), eager and replayed from its per-shape CUDA graph, with the products
// the backend chose for the shape (timed at its first step, or read from the
// cache in $DMUON_CACHE_DIR), and replayed with the plain products, with
// the best symmetric ones and with Gram Newton-Schulz forced (where each fits),
// Gram with Q's update beside R's and in one order;
// the host cost of one replayed step (per-shape graph and whole-step graph); and the
// rate of a plain cuBLAS bf16 GEMM of the iteration's size beside the
// iteration's GEMM-counted rate. bench_torch_ns.py times PyTorch's iteration.
#include <cublas_v2.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_programmatic_edges.hpp"
#include "bench_backend.cuh"
#include "core/optimizer.hpp"

namespace {

using bench::backend_of;

// Gram forced, NsTuneConfig::*option on and off in alternation (three
// rounds, best of each); prints both times per matrix.
void gram_side_by_side(const std::vector<bench::Param>& params, int it, int count, bool dmuon::NsTuneConfig::*option,
                       const std::string& on_tag, const std::string& off_tag) {
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 3; ++round)
    for (int on : {1, 0}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.muon_ns_symmetric = DMUON_NS_SYMMETRIC_GRAM;
      bench::Run run(params, o);
      backend_of(run)->ns_tuner().config.*option = on != 0;
      best[on] = std::min(best[on], run.ms_per_step(3, it) / count);
    }
  bench::result(on_tag, best[1]);
  bench::result(off_tag, best[0]);
}

const dmuon::NsTuner::Choice* choice_of(bench::Run& run, int64_t rows, int64_t cols, int count) {
  dmuon::CudaBackend* b = backend_of(run);
  return b ? b->ns_tuner().choice(rows, cols, count) : nullptr;
}

// TFLOP/s of `count` strided-batched bf16 GEMMs (fp32 accumulation) of
// k x k times k x n, the iteration's B X product, on the default heuristic.
double gemm_tflops(int64_t k, int64_t n, int count) {
  cublasHandle_t h = nullptr;
  bench::cuda(cudaSetDevice(0), "cudaSetDevice");
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  bench::cuda(cudaMalloc(&a, 2 * k * k * count), "cudaMalloc");
  bench::cuda(cudaMalloc(&b, 2 * k * n * count), "cudaMalloc");
  bench::cuda(cudaMalloc(&c, 2 * k * n * count), "cudaMalloc");
  bench::fill(a, k * k * count, DMUON_DTYPE_BF16, 1, 0.01f, nullptr);
  bench::fill(b, k * n * count, DMUON_DTYPE_BF16, 2, 0.01f, nullptr);
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    return cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(k), int(k), &one, b, CUDA_R_16BF, int(n),
                                      k * n, a, CUDA_R_16BF, int(k), k * k, &zero, c, CUDA_R_16BF, int(n), k * n, count,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  double tflops = 0;
  if (gemm() == CUBLAS_STATUS_SUCCESS) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int reps = 20;
    cudaEventRecord(e0);
    for (int i = 0; i < reps; ++i) gemm();
    cudaEventRecord(e1);
    bench::cuda(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    tflops = 2.0 * double(k) * k * n * count * reps / (ms * 1e-3) / 1e12;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cublasDestroy(h);
  return tflops;
}

// Nodes of the run's whole-step graph (-1 when it has none).
int graph_nodes(bench::Run& run) {
  dmuon::CudaBackend* b = backend_of(run);
  return b ? b->diagnostics(run.opt->impl.step_state()).step_graph_nodes : -1;
}

// Programmatic edges of the run's whole-step graph (DMUON_CUDA_PDL; -1 when it has no graph).
int graph_programmatic_edges(bench::Run& run) {
  dmuon::CudaBackend* b = backend_of(run);
  void* g = b ? b->diagnostics(run.opt->impl.step_state()).step_graph : nullptr;
  return g ? dmuon::programmatic_edges(static_cast<cudaGraph_t>(g)) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_ns: Newton-Schulz per shape");
  int iters = 20, count = 1;
  std::string only;
  desc.add_options()("help", "this text")("iters", po::value(&iters)->default_value(20), "timed steps")(
      "count", po::value(&count)->default_value(1), "matrices of each shape (batched)")(
      "shape", po::value(&only)->default_value(""), "only this shape, e.g. 2048x2048 (profiling one shape)");
  if (!bench::parse_options(argc, argv, desc)) {
    MPI_Finalize();
    return 0;
  }
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{768, 768}, {768, 3072}, {2048, 2048}, {4096, 4096}, {4096, 16384}};
  for (const auto& s : shapes) {
    if (!only.empty() && only != std::to_string(s.first) + "x" + std::to_string(s.second)) continue;
    std::vector<bench::Param> params;
    for (int i = 0; i < count; ++i)
      params.push_back({"m" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {s.first, s.second}});
    const std::string tag = "ns_" + std::to_string(s.first) + "x" + std::to_string(s.second) + "_n" + std::to_string(count);
    // Fewer timed steps for the largest shape (about 8 ms a matrix), but
    // not too few: with 6, run 5 timed the same sym8 graph of 4096x16384 at
    // 7.88 ms (tuned) and 7.18 ms (forced) in one call.
    const int it = s.first * s.second > (int64_t{1} << 24) ? iters / 2 + 1 : iters;
    const int64_t k = std::min(s.first, s.second), n = std::max(s.first, s.second);
    int best_sym = 0;
    // The backend's own choice first: its first step times the shape (or reads the cache).
    for (int graphs : {1, 0}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;  // muon_ns_symmetric: timed (auto)
      o.cuda_graphs = graphs;
      bench::Run run(params, o);
      const double ms = run.ms_per_step(3, it) / count;
      bench::result(tag + (graphs ? "_graph_ms" : "_eager_ms"), ms);
      if (!graphs) continue;
      const bench::Run::HostCost hc = run.host_cost(6, 5);
      bench::result(tag + "_host_us", hc.median_us);
      bench::result(tag + "_host_mean_us", hc.mean_us);
      bench::result(tag + "_host_first_us", hc.first_us);
      {
        // The same step replayed as one whole-step graph: one launch, whatever
        // the shape graph's node count (both counts printed beside it).
        dmuon_options_t ow = DMUON_OPTIONS_INIT;
        ow.cuda_step_graph = 1;
        bench::Run whole(params, ow);
        whole.ms_per_step(4, 2);  // eager warm-up, capture, replays
        const bench::Run::HostCost wc = whole.host_cost(6, 5);
        bench::result(tag + "_stepgraph_host_us", wc.median_us);
        bench::result(tag + "_stepgraph_host_first_us", wc.first_us);
        bench::result(tag + "_stepgraph_nodes", graph_nodes(whole));
        bench::result(tag + "_stepgraph_programmatic_edges", graph_programmatic_edges(whole));
      }
      // GEMM-counted flops of the plain iteration: 5 x (4 k^2 n + 2 k^3) per matrix.
      bench::result(tag + "_ns_tflops", dmuon::ns_plain_flops(k, n, 5) / (ms * 1e-3) / 1e12);
      if (const dmuon::NsTuner::Choice* c = choice_of(run, s.first, s.second, count)) {
        best_sym = c->best_sym_blocks;
        bench::result(tag + "_choice_blocks", c->blocks);
        bench::result(tag + "_best_sym_blocks", c->best_sym_blocks);
        bench::result(tag + "_tuned_plain_ms", c->plain_ms / count);
        if (c->sym_ms > 0) bench::result(tag + "_tuned_sym_ms", c->sym_ms / count);
        std::printf("CHOICE %s %s; %s\n", tag.c_str(), c->note.c_str(), c->detail.c_str());
      }
    }
    // Plain products forced, and the best symmetric candidate forced (graphs).
    if (best_sym == dmuon::kNsGramBlocks) best_sym = 0;  // Gram has its own row below
    for (int forced : {0, best_sym}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.muon_ns_symmetric = forced;
      bench::Run run(params, o);
      bench::result(tag + (forced ? "_sym_ms" : "_plain_ms"), run.ms_per_step(3, it) / count);
      if (!best_sym) break;  // no symmetric candidate fits or passed the check
    }
    // Gram Newton-Schulz forced, quintic and Polar Express (graphs), with its
    // GEMM-counted flops; the plain products' Polar Express time beside it.
    if (dmuon::ns_gram_possible(k, n)) {
      bench::result(tag + "_gram_flop_ratio", dmuon::ns_gram_flops(k, n, 5) / dmuon::ns_plain_flops(k, n, 5));
      for (int schedule : {DMUON_NS_QUINTIC, DMUON_NS_POLAR_EXPRESS}) {
        const std::string sfx = schedule == DMUON_NS_QUINTIC ? "" : "_pe";
        for (const char* forced : {"gram", "0"}) {
          if (schedule == DMUON_NS_QUINTIC && forced[0] == '0') continue;  // measured above
          dmuon_options_t o = DMUON_OPTIONS_INIT;
          o.muon_ns_schedule = schedule;
          o.muon_ns_symmetric = forced[0] == 'g' ? DMUON_NS_SYMMETRIC_GRAM : DMUON_NS_SYMMETRIC_OFF;
          bench::Run run(params, o);
          bench::result(tag + (forced[0] == 'g' ? "_gram" : "_plain") + sfx + "_ms", run.ms_per_step(3, it) / count);
        }
      }
    }
    // Gram forced with one of its options on and off, alternated over three
    // rounds (best of each): side by side. Q's update beside R's (a second
    // stream, n >= 3k) or in one order; for a single matrix, the
    // normalisation in the first products or a pass over X, and the update
    // in the last product or a pass over the parameter.
    if (dmuon::ns_gram_possible(k, n) && dmuon::gram_ns_fits_beside(k, n))
      gram_side_by_side(params, it, count, &dmuon::NsTuneConfig::gram_beside, tag + "_gram_beside_ms",
                        tag + "_gram_one_order_ms");
    if (count == 1 && dmuon::ns_gram_possible(k, n)) {
      gram_side_by_side(params, it, count, &dmuon::NsTuneConfig::gram_defer_norm, tag + "_gram_defer_ms",
                        tag + "_gram_pass_ms");
      gram_side_by_side(params, it, count, &dmuon::NsTuneConfig::gram_fuse_update, tag + "_gram_fused_update_ms",
                        tag + "_gram_update_pass_ms");
    }
    bench::result(tag + "_gemm_tflops", gemm_tflops(k, n, count));
  }
  MPI_Finalize();
  return 0;
}
