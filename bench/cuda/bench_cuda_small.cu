// Small optimizer steps on one GPU, where the host's cost and the launch
// latencies are what counts:
//   - the small models of mixes.hpp (small_mlp: the demo's MLP, and 9-256x4-1
//     with Muon on the hidden matrices), eager and with the whole-step graph:
//     device time per step (steps queued behind a held stream, so the host's
//     pace does not enter), host time per dmuon_step call, and the floor of
//     one device copy of the optimizer's bytes (at one rank there is no
//     all-reduce); and the step graph's device time with Newton-Schulz on
//     the cuBLAS GEMMs instead of the fused small-matrix kernel;
//   - Adam over 1000 tiny tensors (mixes.hpp's tiny_adam), fp32 and bf16,
//     eager and step graph: GPU time per step.
// bench_torch_small.py times torch (Muon + fused AdamW) on the same sets.
#include "mixes.hpp"

namespace {

// Device microseconds per step, queued behind a held stream. The scalar ring
// holds 8 steps, so at most 7 calls fit in a round before the host waits.
double device_us_per_step(bench::Run& run, int calls, int rounds) {
  return bench::held_device_us(
      run.stream, [&run] { bench::check(dmuon_step(run.opt), "dmuon_step", run.ctx); }, calls, rounds);
}

// Device microseconds of one copy of `bytes` (read + write of bytes / 2 each way).
double copy_us(std::size_t bytes) {
  void *a = nullptr, *b = nullptr;
  const std::size_t half = std::max<std::size_t>(bytes / 2, 256);
  bench::cuda(cudaMalloc(&a, half), "cudaMalloc");
  bench::cuda(cudaMalloc(&b, half), "cudaMalloc");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) cudaMemcpyAsync(b, a, half, cudaMemcpyDeviceToDevice);
  const int reps = 100;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cudaMemcpyAsync(b, a, half, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  bench::cuda(cudaEventSynchronize(e1), "cudaEventSynchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 1e3 * ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int iters = 200;
  if (!bench::parse_iters(argc, argv, "bench_cuda_small: small models' steps and Adam over 1000 tiny tensors", iters)) {
    MPI_Finalize();
    return 0;
  }
  struct Model {
    const char* tag;
    std::vector<bench::Param> params;
  };
  const Model models[] = {{"demo", bench::small_mlp(9, 64, 3, 1)}, {"mlp256", bench::small_mlp(9, 256, 4, 1)}};
  for (const Model& m : models) {
    // Parameters, gradients and state: Adam 2 fp32 moments, Muon 1 momentum.
    double bytes = 0;
    for (const bench::Param& p : m.params) bytes += double(p.numel()) * (8.0 + (p.kind == DMUON_KIND_ADAM ? 8.0 : 4.0));
    bench::result(std::string("small_") + m.tag + "_floor_us", copy_us(static_cast<std::size_t>(bytes)));
    for (int step_graph : {0, 1}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.cuda_step_graph = step_graph;
      bench::Run run(m.params, o);
      const std::string tag = std::string("small_") + m.tag + (step_graph ? "_graph" : "_eager");
      bench::result(tag + "_ms", run.ms_per_step(5, iters));  // back to back: the slower of host and device
      bench::result(tag + "_device_us", device_us_per_step(run, 6, 10));
      bench::result(tag + "_host_us", run.host_cost(6, 10).median_us);
    }
    // The same step graph with Newton-Schulz on the cuBLAS GEMMs instead of
    // the fused small-matrix kernel (muon_ns_symmetric off), side by side.
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.cuda_step_graph = 1;
    o.muon_ns_symmetric = DMUON_NS_SYMMETRIC_OFF;
    bench::Run run(m.params, o);
    bench::result(std::string("small_") + m.tag + "_gemm_graph_device_us", device_us_per_step(run, 6, 10));
  }
  for (int dtype : {DMUON_DTYPE_FP32, DMUON_DTYPE_BF16}) {
    const std::string d = dtype == DMUON_DTYPE_FP32 ? "fp32" : "bf16";
    for (int step_graph : {0, 1}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.cuda_step_graph = step_graph;
      bench::Run run(bench::tiny_adam(dtype), o);
      const std::string tag = "tiny_adam_" + d + (step_graph ? "_graph" : "_eager");
      bench::result(tag + "_ms", run.ms_per_step(5, iters));
      bench::result(tag + "_device_us", device_us_per_step(run, 6, 10));
      bench::result(tag + "_host_us", run.host_cost(6, 10).median_us);
    }
  }
  MPI_Finalize();
  return 0;
}
