// Newton-Schulz per shape: one Muon step of `count` same-shape bf16 matrices
// (momentum, normalisation, 5 quintic iterations in bf16 through cuBLAS,
// update), eager and replayed from its per-shape CUDA graph, and the host
// cost of one replayed step. bench_torch_ns.py times PyTorch's bf16 iteration.
#include <boost/program_options.hpp>
#include <iostream>

#include "bench_common.cuh"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_ns: Newton-Schulz per shape");
  int iters = 20, count = 1;
  desc.add_options()("help", "this text")("iters", po::value(&iters)->default_value(20), "timed steps")(
      "count", po::value(&count)->default_value(1), "matrices of each shape (batched)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    MPI_Finalize();
    return 0;
  }
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{768, 768}, {768, 3072}, {2048, 2048}, {4096, 4096}, {4096, 16384}};
  for (const auto& s : shapes) {
    std::vector<bench::Param> params;
    for (int i = 0; i < count; ++i)
      params.push_back({"m" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {s.first, s.second}});
    const std::string tag = "ns_" + std::to_string(s.first) + "x" + std::to_string(s.second) + "_n" + std::to_string(count);
    for (int graphs : {0, 1}) {
      dmuon_options_t o = DMUON_OPTIONS_INIT;
      o.cuda_graphs = graphs;
      bench::Run run(params, o);
      const int it = s.first * s.second > (int64_t{1} << 24) ? iters / 4 + 1 : iters;
      bench::result(tag + (graphs ? "_graph_ms" : "_eager_ms"), run.ms_per_step(3, it) / count);
      if (graphs) bench::result(tag + "_host_us", run.host_us_per_step(6));
    }
  }
  MPI_Finalize();
  return 0;
}
