// Adam step bandwidth on the CPU backend beside a plain copy of the same
// number of bytes, timed in the same run.
//
// Bytes counted per element: read param, grad, exp_avg, exp_avg_sq; write
// param, exp_avg, exp_avg_sq (fp32 state): 28 B for fp32, 22 B for bf16
// parameters. The copy moves half that many bytes, so it also reads and
// writes the same total.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "dmuon/dmuon.h"

namespace po = boost::program_options;

using bench::check;
using bench::now;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  po::options_description desc("bench_adam: fused AdamW step bandwidth vs a plain copy");
  std::string params_s, dtype_s, backend;
  int tensors = 300, iters = 20;
  desc.add_options()("help", "this text")("params", po::value(&params_s)->default_value("50M"), "total parameters (K/M/G suffix)")(
      "tensors", po::value(&tensors)->default_value(300), "number of Adam tensors")(
      "dtype", po::value(&dtype_s)->default_value("fp32"), "fp32 or bf16")(
      "iters", po::value(&iters)->default_value(20), "timed iterations")(
      "backend", po::value(&backend)->default_value("cpu"), "cpu, cuda or auto");
  po::variables_map vm;
  if (!bench::parse_options(argc, argv, desc, vm)) {
    MPI_Finalize();
    return 2;
  }
  if (vm.count("help")) {
    std::printf("%s", bench::help_text(desc).c_str());
    MPI_Finalize();
    return 0;
  }
  const int64_t total = bench::parse_count(params_s);
  const int dtype = dtype_s == "bf16" ? DMUON_DTYPE_BF16 : DMUON_DTYPE_FP32;
  const int elem = dtype == DMUON_DTYPE_BF16 ? 2 : 4;

  dmuon_context_t ctx = nullptr;
  check(dmuon_context_create(MPI_COMM_WORLD, backend.c_str(), &ctx), ctx, "context");
  int rank = 0, world = 1;
  dmuon_context_rank(ctx, &rank, &world);
  dmuon_optimizer_t opt = nullptr;
  check(dmuon_optimizer_create(ctx, nullptr, &opt), ctx, "optimizer");
  // A mix of sizes like a model's small tensors: sizes grow geometrically.
  std::vector<int64_t> sizes(static_cast<std::size_t>(tensors));
  double weight_sum = 0;
  for (int i = 0; i < tensors; ++i) weight_sum += 1.0 + (i % 10);
  int64_t placed = 0;
  for (int i = 0; i < tensors; ++i) {
    sizes[i] = std::max<int64_t>(1, static_cast<int64_t>(total * (1.0 + (i % 10)) / weight_sum));
    placed += sizes[i];
  }
  for (int i = 0; i < tensors; ++i) {
    const std::string name = "t" + std::to_string(i);
    check(dmuon_register(opt, name.c_str(), DMUON_KIND_ADAM, dtype, 1, &sizes[i], 1.0, 1.0, nullptr), ctx, "register");
  }
  check(dmuon_optimizer_finalize(opt), ctx, "finalize");
  for (int i = 0; i < tensors; ++i) {
    void* g = nullptr;
    dmuon_param_view(opt, i, nullptr, &g);
    if (std::string(backend) == "cpu") std::memset(g, 0x3c, static_cast<std::size_t>(sizes[i]) * elem);
  }

  check(dmuon_step(opt), ctx, "warm-up step");
  double t0 = now();
  for (int i = 0; i < iters; ++i) check(dmuon_step(opt), ctx, "step");
  int64_t steps = 0;
  dmuon_get_step_count(opt, &steps);  // waits for the device on GPU backends
  const double step_s = (now() - t0) / iters;

  const double bytes_per_elem = dtype == DMUON_DTYPE_BF16 ? 22.0 : 28.0;
  const double adam_bytes = bytes_per_elem * static_cast<double>(placed);
  // The copy reads and writes adam_bytes in total.
  const std::size_t copy_n = static_cast<std::size_t>(adam_bytes / 2);
  std::vector<char> src(copy_n, 1), dst(copy_n, 0);
  std::memcpy(dst.data(), src.data(), copy_n);
  t0 = now();
  for (int i = 0; i < iters; ++i) {
    src[static_cast<std::size_t>(i) % copy_n] = static_cast<char>(i);
    std::memcpy(dst.data(), src.data(), copy_n);
  }
  const double copy_s = (now() - t0) / iters;
  if (rank == 0) {
    std::printf("backend=%s ranks=%d params=%lld tensors=%d dtype=%s iters=%d\n", backend.c_str(), world,
                static_cast<long long>(placed), tensors, dtype_s.c_str(), iters);
    std::printf("adam_step_ms=%.3f adam_GBps=%.2f copy_ms=%.3f copy_GBps=%.2f ratio=%.3f\n", step_s * 1e3,
                adam_bytes / step_s / 1e9, copy_s * 1e3, adam_bytes / copy_s / 1e9, copy_s / step_s);
  }
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  MPI_Finalize();
  return 0;
}
