// The NCCL phases of a dmuon step beside plain NCCL calls of the same bytes,
// in one run: the Adam all-reduce (average) of the replicated gradients, and
// the Muon reduce-scatter of the gradients plus all-gather of the parameters,
// each issued through the "cuda" backend on the optimizer's own flat
// buffers; against ncclAllReduce, and ncclReduceScatter + ncclAllGather, on
// a communicator and buffers of the bench's own. Ratios near 1 say dmuon adds
// nothing to NCCL's own cost, whatever the transport (NVLink between GPUs, or
// sockets when the ranks share one GPU through tests/gpu/gpu_rank.sh).
//
//   mpiexec -n N tests/gpu/gpu_rank.sh bench_cuda_comm [--muon-mb 32] [--adam-mb 32] [--iters 20]
//
// Prints "RESULT comm_np<N>_<key> <value>" lines for bench/cuda/gpu_table.py.
#include <nccl.h>

#include <boost/program_options.hpp>
#include <iostream>

#include "bench_common.cuh"
#include "core/context.hpp"
#include "core/optimizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Mean milliseconds of `body` over `iters` calls after two warm-up calls,
// `wait` draining the device after each batch; the slowest rank's time.
template <class Body, class Wait>
double time_ms(int iters, Body body, Wait wait) {
  for (int i = 0; i < 2; ++i) body();
  wait();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  wait();
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters, worst = 0;
  MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

void nccl(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  std::fprintf(stderr, "%s failed: %s\n", what, ncclGetErrorString(rc));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  double muon_mb = 32, adam_mb = 32;
  int iters = 20;
  po::options_description desc("bench_cuda_comm options");
  desc.add_options()("help", "this text")("muon-mb", po::value(&muon_mb), "bf16 Muon matrices, MB in all")(
      "adam-mb", po::value(&adam_mb), "fp32 Adam parameters, MB")("iters", po::value(&iters), "timed calls per phase");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  // Square 1024 x 1024 bf16 matrices (2 MB each), one per rank at least.
  const int matrices = std::max(world, static_cast<int>(muon_mb / 2 + 0.5));
  const int64_t adam_elems = static_cast<int64_t>(adam_mb * 1e6 / 4);
  std::vector<bench::Param> params;
  for (int i = 0; i < matrices; ++i)
    params.push_back({"w" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {1024, 1024}});
  params.push_back({"adam", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {adam_elems}});

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  bench::check(dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx), "dmuon_context_create", ctx);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  bench::check(dmuon_optimizer_create(ctx, &o, &opt), "dmuon_optimizer_create", ctx);
  for (const bench::Param& p : params)
    bench::check(dmuon_register(opt, p.name.c_str(), p.kind, p.dtype, int(p.shape.size()), p.shape.data(), 1.0, 1.0,
                                nullptr),
                 "dmuon_register", ctx);
  bench::check(dmuon_optimizer_finalize(opt), "dmuon_optimizer_finalize", ctx);

  dmuon::Backend& b = *ctx->backend;
  const dmuon::Optimizer& impl = opt->impl;
  const dmuon::MuonBuffers& mb = impl.muon_buffers(dmuon::Dtype::bf16);
  const dmuon::AdamBuffers& ab = impl.adam_buffers(dmuon::Dtype::fp32);
  const int64_t segment = mb.segment_elements, muon_elems = segment * world;
  const double muon_bytes = double(muon_elems) * 2, adam_bytes = double(ab.elements) * 4;

  // The bench's own NCCL communicator and buffers of the same sizes.
  ncclUniqueId id;
  if (rank == 0) nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  nccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  cudaStream_t s = nullptr;
  bench::cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  void *muon_buf = nullptr, *adam_buf = nullptr;
  bench::cuda(cudaMalloc(&muon_buf, static_cast<std::size_t>(muon_bytes)), "cudaMalloc");
  bench::cuda(cudaMalloc(&adam_buf, static_cast<std::size_t>(adam_bytes)), "cudaMalloc");
  bench::cuda(cudaMemset(muon_buf, 0, static_cast<std::size_t>(muon_bytes)), "cudaMemset");
  bench::cuda(cudaMemset(adam_buf, 0, static_cast<std::size_t>(adam_bytes)), "cudaMemset");
  auto raw_wait = [&] { bench::cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize"); };
  auto ours_wait = [&] { b.synchronize(); };

  const double ours_adam = time_ms(iters, [&] { b.allreduce_gradients(ab.grad, ab.elements, dmuon::Dtype::fp32); }, ours_wait);
  const double raw_adam = time_ms(iters, [&] {
    nccl(ncclAllReduce(adam_buf, adam_buf, size_t(ab.elements), ncclFloat32, ncclAvg, comm, s), "ncclAllReduce");
  }, raw_wait);
  const double ours_muon = time_ms(iters, [&] {
    b.reduce_scatter_average(mb.grad, segment, dmuon::Dtype::bf16);
    b.allgather(mb.param, segment, dmuon::Dtype::bf16);
  }, ours_wait);
  char* mine = static_cast<char*>(muon_buf) + static_cast<std::size_t>(rank) * segment * 2;
  const double raw_muon = time_ms(iters, [&] {
    nccl(ncclReduceScatter(muon_buf, mine, size_t(segment), ncclBfloat16, ncclAvg, comm, s), "ncclReduceScatter");
    nccl(ncclAllGather(mine, muon_buf, size_t(segment), ncclBfloat16, comm, s), "ncclAllGather");
  }, raw_wait);
  const double raw_muon_ar = time_ms(iters, [&] {
    nccl(ncclAllReduce(muon_buf, muon_buf, size_t(muon_elems), ncclBfloat16, ncclAvg, comm, s), "ncclAllReduce");
  }, raw_wait);

  if (rank == 0) {
    const std::string k = "RESULT comm_np" + std::to_string(world) + "_";
    std::printf("%sadam_mb %.1f\n%smuon_mb %.1f\n", k.c_str(), adam_bytes / 1e6, k.c_str(), muon_bytes / 1e6);
    std::printf("%sadam_ours_ms %.4f\n%sadam_nccl_ms %.4f\n", k.c_str(), ours_adam, k.c_str(), raw_adam);
    std::printf("%smuon_ours_ms %.4f\n%smuon_nccl_ms %.4f\n%smuon_allreduce_ms %.4f\n", k.c_str(), ours_muon, k.c_str(),
                raw_muon, k.c_str(), raw_muon_ar);
  }
  cudaFree(muon_buf);
  cudaFree(adam_buf);
  cudaStreamDestroy(s);
  ncclCommDestroy(comm);
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  MPI_Finalize();
  return 0;
}
