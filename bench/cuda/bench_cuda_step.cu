// A whole optimizer step for a GPT-2-small-like set (48 Muon matrices, 98
// small Adam tensors, fp32 parameters) on one GPU: eager, per-shape graphs,
// and the whole-step graph; plus the host cost of a replayed whole step.
// Each mode runs twice in the same process: plain, and "_training" with a
// learning-rate schedule on both groups and two metrics submitted (from
// device memory) before every step, to show what those cost.
// Eager and whole-step graph also run with the shape batches in the default
// lanes, in two lanes and in one order (NsTuneConfig::shape_lanes
// kNsDefaultShapeLanes, 2 and 1), and in the default lanes without clipping,
// alternating, best of three rounds each: "_lanes", "_two_lanes" and
// "_noclip" beside "_one_order". The one without clipping is what torch's
// step without clipping is held against.
// bench_torch_step.py times torch.optim.Muon + fused AdamW on the same set.
#include <algorithm>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "bench_backend.cuh"
#include "mixes.hpp"

namespace {

// The step with its shapes in each lane count, and without clipping, alternating.
void variants_side_by_side(const std::vector<bench::Param>& set, const char* tag, int graphs, int step_graph,
                           int iters) {
  struct Variant {
    int lanes;
    double max_grad_norm;  // 0: no clipping
    const char* suffix;
    double best;
  } variants[] = {{1, 1.0, "_one_order_ms", 1e30},
                  {dmuon::kNsDefaultShapeLanes, 1.0, "_lanes_ms", 1e30},
                  {2, 1.0, "_two_lanes_ms", 1e30},
                  {dmuon::kNsDefaultShapeLanes, 0.0, "_noclip_ms", 1e30}};
  for (int round = 0; round < 3; ++round)
    for (Variant& v : variants) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.cuda_graphs = graphs;
      o.cuda_step_graph = step_graph;
      o.max_grad_norm = v.max_grad_norm;
      bench::Run run(set, o);
      bench::backend_of(run)->ns_tuner().config.shape_lanes = v.lanes;
      v.best = std::min(v.best, run.ms_per_step(3, iters));
    }
  for (const Variant& v : variants) bench::result(std::string("step_") + tag + v.suffix, v.best);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int iters = 30;
  if (!bench::parse_iters(argc, argv, "bench_cuda_step: whole GPT-2-small optimizer step", iters)) {
    MPI_Finalize();
    return 0;
  }
  const auto set = bench::gpt2_small_step();
  // What the step's floor is made of (gpu_table.py): the GEMM-counted flops of
  // five plain quintic iterations per Muon matrix (X X^T and B X: 2 k^2 n each,
  // A A: 2 k^3), and the bytes of the Adam pass (fp32: parameter, moments read
  // and written, gradient read: 28 per element).
  double ns_flop = 0, adam_bytes = 0;
  for (const bench::Param& p : set) {
    if (p.kind == DMUON_KIND_MUON) {
      const double k = double(std::min(p.shape[0], p.shape[1])), n = double(std::max(p.shape[0], p.shape[1]));
      ns_flop += 5 * (4 * k * k * n + 2 * k * k * k);
    } else {
      adam_bytes += 28.0 * double(p.numel());
    }
  }
  bench::result("step_ns_plain_gflop", ns_flop / 1e9);
  bench::result("step_adam_bytes", adam_bytes);
  struct Mode {
    const char* tag;
    int graphs, step_graph;
  };
  double* metrics = nullptr;  // two doubles of device memory: a loss and a count
  bench::cuda(cudaMalloc(&metrics, 2 * sizeof(double)), "cudaMalloc (metrics)");
  bench::cuda(cudaMemset(metrics, 0, 2 * sizeof(double)), "cudaMemset (metrics)");
  for (const Mode m : {Mode{"eager", 0, 0}, Mode{"shape_graphs", 1, 0}, Mode{"step_graph", 1, 1}}) {
    for (const bool training : {false, true}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.cuda_graphs = m.graphs;
      o.cuda_step_graph = m.step_graph;
      o.max_grad_norm = 1.0;  // clipping on: the norm is part of the step
      bench::Run run(set, o);
      if (training) {
        dmuon_lr_schedule_t s = DMUON_LR_SCHEDULE_INIT;
        s.kind = DMUON_LR_COSINE;
        s.warmup_steps = 5;
        s.total_steps = 1000;
        bench::check(dmuon_set_lr_schedule(run.opt, DMUON_KIND_MUON, &s), "dmuon_set_lr_schedule", run.ctx);
        bench::check(dmuon_set_lr_schedule(run.opt, DMUON_KIND_ADAM, &s), "dmuon_set_lr_schedule", run.ctx);
        run.before_step = [&run, metrics] {
          bench::check(dmuon_metrics_submit(run.opt, 2, metrics, DMUON_METRICS_MEAN), "dmuon_metrics_submit", run.ctx);
        };
      }
      const std::string tag = std::string("step_") + m.tag + (training ? "_training" : "");
      bench::result(tag + "_ms", run.ms_per_step(3, iters));
      bench::result(tag + "_host_us", run.host_cost(6, 5).median_us);
    }
  }
  cudaFree(metrics);
  variants_side_by_side(set, "eager", 0, 0, iters);
  variants_side_by_side(set, "step_graph", 1, 1, iters);
  MPI_Finalize();
  return 0;
}
