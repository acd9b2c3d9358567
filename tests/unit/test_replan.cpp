// Optimizer::replan (a restore onto another plan) allocates the new storage
// before it frees the old: when the allocation fails, the optimizer keeps its
// plan, its buffers and their contents, and goes on stepping. The failure is
// provoked with an address-space limit just above what the process uses.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "core/optimizer.hpp"
#include "dmuon/dmuon.h"

namespace {

// Bytes of address space the process holds now (/proc/self/statm, pages).
long address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  statm >> pages;
  return pages * sysconf(_SC_PAGESIZE);
}

std::vector<unsigned char> bytes_of(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  return {b, b + n};
}

}  // namespace

TEST(Replan, FailedAllocationKeepsThePlanAndTheState) {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  // About 100 MB of storage: far more than the limit's slack below.
  const int64_t mat[2] = {1024, 1024}, vec[1] = {1 << 20};
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(dmuon_register(opt, ("w" + std::to_string(i)).c_str(), DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, mat, 1, 1,
                             nullptr),
              DMUON_SUCCESS);
  ASSERT_EQ(dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, vec, 1, 1, nullptr), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS);
  for (int id = 0; id < 5; ++id) {
    void *p = nullptr, *g = nullptr;
    ASSERT_EQ(dmuon_param_view(opt, id, &p, &g), DMUON_SUCCESS);
    const int64_t n = id < 4 ? mat[0] * mat[1] : vec[0];
    for (int64_t i = 0; i < n; ++i) {
      static_cast<float*>(p)[i] = 0.001f * static_cast<float>((i * 7 + id) % 1000);
      static_cast<float*>(g)[i] = 0.01f;
    }
  }
  ASSERT_EQ(dmuon_step(opt), DMUON_SUCCESS);

  dmuon::Optimizer& o = opt->impl;
  const auto& mb = o.muon_buffers(dmuon::Dtype::fp32);
  const auto& ab = o.adam_buffers(dmuon::Dtype::fp32);
  const void* muon_param = mb.param;
  const void* adam_m = ab.exp_avg;
  const std::size_t muon_bytes = static_cast<std::size_t>(mb.segment_elements) * 4;
  const std::size_t adam_bytes = static_cast<std::size_t>(ab.elements) * 4;
  const auto params_before = bytes_of(mb.param, muon_bytes);
  const auto momentum_before = bytes_of(mb.momentum, muon_bytes);
  const auto adam_before = bytes_of(ab.exp_avg_sq, adam_bytes);
  std::vector<int> owners;
  for (int id = 0; id < 4; ++id) owners.push_back(o.owner(id));

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(address_space_bytes() + (16L << 20));
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  bool threw = false;
  try {
    o.replan(owners);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  ASSERT_TRUE(threw) << "replan did not fail under the limit (the new storage fitted): nothing was tested";

  // The same buffers, the same contents.
  EXPECT_EQ(mb.param, muon_param);
  EXPECT_EQ(ab.exp_avg, adam_m);
  EXPECT_EQ(bytes_of(mb.param, muon_bytes), params_before);
  EXPECT_EQ(bytes_of(mb.momentum, muon_bytes), momentum_before);
  EXPECT_EQ(bytes_of(ab.exp_avg_sq, adam_bytes), adam_before);
  for (int id = 0; id < 4; ++id) EXPECT_EQ(o.owner(id), owners[static_cast<std::size_t>(id)]);
  EXPECT_EQ(dmuon_step(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  // With room again, the re-plan goes through.
  EXPECT_NO_THROW(o.replan(owners));
  EXPECT_EQ(dmuon_step(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);

  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
}
