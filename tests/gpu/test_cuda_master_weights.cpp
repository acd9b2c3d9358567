// Master weights on the "cuda" backend (the kernels of cuda_adam.cu and
// cuda_muon.cu), with the model and checks of the CPU test
// (tests/training/master_weights_model.hpp) over device views: updates of
// 1e-4 of the parameter move a bf16 parameter within one bf16 ulp of an fp32
// one, and vanish without the option; a value written into a device view is
// read by the next step; the masters go through a checkpoint (the backend's
// staging) on N ranks and back on M and the run goes on bit for bit. The
// kernels' checks run per rank on MPI_COMM_SELF (the reduction across ranks is
// the CPU test's): several ranks on one GPU talk over NCCL's socket transport,
// too slow for hundreds of steps.
#include <cuda_runtime.h>

#include "training/master_weights_model.hpp"

namespace {

using master_weights_test::expect_tracks_fp32;
using master_weights_test::kSteps;
using master_weights_test::Trio;

master_weights_test::Backend cuda() {
  master_weights_test::Backend b;
  b.resource = "cuda";
  // Synchronous copies on the legacy default stream: ordered with the step (dmuon_step's stream contract).
  b.to_views = [](void* d, const void* s, std::size_t n) { ASSERT_EQ(cudaMemcpy(d, s, n, cudaMemcpyHostToDevice), cudaSuccess); };
  b.from_views = [](void* d, const void* s, std::size_t n) { ASSERT_EQ(cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost), cudaSuccess); };
  return b;
}

TEST(CudaMasterWeights, AdamUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_ADAM, cuda(), MPI_COMM_SELF);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 2, false);
}

TEST(CudaMasterWeights, MuonUpdatesOf1e4RelativeMoveBf16AsFp32) {
  Trio t(DMUON_KIND_MUON, cuda(), MPI_COMM_SELF);
  const std::vector<float> initial = t.plain.values();
  t.run(kSteps);
  expect_tracks_fp32(t, initial, 1, false);
}

TEST(CudaMasterWeights, AValueWrittenIntoTheViewIsReadByTheNextStep) {
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    Trio t(kind, cuda(), MPI_COMM_SELF);
    t.run(kSteps, kSteps / 2);
    const std::vector<float> f = t.fp32.values(), m = t.master.values();
    for (std::size_t i = 0; i < f.size(); ++i)
      ASSERT_LE(std::fabs(m[i] - f[i]), master_weights_test::ulp(f[i])) << "kind " << kind << " element " << i;
  }
}

TEST(CudaMasterWeights, SavedOnNRanksRestoredOnMGoesOnBitForBit) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int half = world > 1 ? world / 2 : 1;
  for (int kind : {DMUON_KIND_ADAM, DMUON_KIND_MUON}) {
    master_weights_test::resume_across(world, half, kind, cuda());
    master_weights_test::resume_across(half, world, kind, cuda());
  }
}

}  // namespace
