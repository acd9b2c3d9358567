// A whole optimizer step for a GPT-2-small-like set (48 Muon matrices, 98
// small Adam tensors, fp32 parameters) on one GPU: eager, per-shape graphs,
// and the whole-step graph; plus the host cost of a replayed whole step.
// bench_torch_step.py times torch.optim.Muon + fused AdamW on the same set.
#include <boost/program_options.hpp>
#include <iostream>

#include "mixes.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_step: whole GPT-2-small optimizer step");
  int iters = 30;
  desc.add_options()("help", "this text")("iters", po::value(&iters)->default_value(30), "timed steps");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    MPI_Finalize();
    return 0;
  }
  const auto set = bench::gpt2_small_step();
  struct Mode {
    const char* tag;
    int graphs, step_graph;
  };
  for (const Mode m : {Mode{"eager", 0, 0}, Mode{"shape_graphs", 1, 0}, Mode{"step_graph", 1, 1}}) {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.cuda_graphs = m.graphs;
    o.cuda_step_graph = m.step_graph;
    o.max_grad_norm = 1.0;  // clipping on: the norm is part of the step
    bench::Run run(set, o);
    bench::result(std::string("step_") + m.tag + "_ms", run.ms_per_step(3, iters));
    bench::result(std::string("step_") + m.tag + "_host_us", run.host_us_per_step(6));
  }
  MPI_Finalize();
  return 0;
}
