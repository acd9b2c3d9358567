// One optimizer step inside cudaProfilerStart/Stop, for Nsight Compute
// (`ncu --profile-from-start off --metrics gpu__time_duration.sum`): every
// kernel of that step, and only those, after warm-up steps that time the
// shape, capture graphs and allocate. Not a benchmark by itself: it prints
// nothing but what ncu reports. Models:
//   --model ns      `count` bf16 Muon matrices of --shape (bench_cuda_ns's set)
//   --model mlp256  the 9-256x4-1 MLP of bench_cuda_small (mixes.hpp)
//   --model gpt2    the GPT-2-small-like step of bench_cuda_step (mixes.hpp)
// --symmetric takes the values of options.muon_ns_symmetric (-1: auto,
// 0: plain, 1: Gram, 2/4/8: symmetric row blocks); --graphs 0 gives an eager
// step, so that each kernel is a launch of its own.
#include <cuda_profiler_api.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "mixes.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_profile: one step inside cudaProfilerStart/Stop");
  std::string model, shape;
  int count = 1, symmetric = DMUON_NS_SYMMETRIC_AUTO, graphs = 0, warm = 4;
  desc.add_options()("help", "this text")("model", po::value(&model)->default_value("ns"), "ns, mlp256 or gpt2")(
      "shape", po::value(&shape)->default_value("768x3072"), "rows x cols of the ns model")(
      "count", po::value(&count)->default_value(1), "matrices of the ns model (batched)")(
      "symmetric", po::value(&symmetric)->default_value(DMUON_NS_SYMMETRIC_AUTO), "options.muon_ns_symmetric")(
      "graphs", po::value(&graphs)->default_value(0), "options.cuda_graphs (0: eager)")(
      "warm", po::value(&warm)->default_value(4), "steps before the profiled one");
  if (!bench::parse_options(argc, argv, desc)) {
    MPI_Finalize();
    return 0;
  }
  std::vector<bench::Param> params;
  if (model == "mlp256") {
    params = bench::small_mlp(9, 256, 4, 1);
  } else if (model == "gpt2") {
    params = bench::gpt2_small_step();
  } else {
    const std::size_t x = shape.find('x');
    const int64_t rows = std::stoll(shape.substr(0, x)), cols = std::stoll(shape.substr(x + 1));
    for (int i = 0; i < count; ++i)
      params.push_back({"m" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {rows, cols}});
  }
  {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.muon_ns_symmetric = symmetric;
    o.cuda_graphs = graphs;
    bench::Run run(params, o);
    for (int i = 0; i < warm; ++i) run.step();
    bench::cuda(cudaStreamSynchronize(run.stream), "cudaStreamSynchronize");
    cudaProfilerStart();
    run.step();
    bench::cuda(cudaStreamSynchronize(run.stream), "cudaStreamSynchronize");
    cudaProfilerStop();
  }
  MPI_Finalize();
  return 0;
}
