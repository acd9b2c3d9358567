// Lifetimes: an optimizer holds a reference on its context, so the handles
// can be destroyed in any order, with steps of the surviving optimizers in
// between (run under ASan by scripts/sanitize.sh: a read of a freed context
// fails there even where it happens not to crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>

#include "dmuon/dmuon.h"

namespace {

// A small model (one Muon matrix, one Adam vector), finalized, with a
// gradient written so that every step changes the parameters.
dmuon_optimizer_t make_optimizer(dmuon_context_t ctx) {
  dmuon_optimizer_t opt = nullptr;
  EXPECT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  const int64_t w[2] = {8, 4}, b[1] = {5};
  EXPECT_EQ(dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, w, 1.0, 1.0, nullptr), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b, 1.0, 1.0, nullptr), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS);
  return opt;
}

// One step after writing a gradient; Adam parameter `id` (5 elements) must move.
void step_moves(dmuon_optimizer_t opt, int id = 1) {
  float *p = nullptr, *g = nullptr;
  ASSERT_EQ(dmuon_param_view(opt, id, reinterpret_cast<void**>(&p), reinterpret_cast<void**>(&g)), DMUON_SUCCESS);
  std::fill(g, g + 5, 0.5f);
  const float before = p[0];
  ASSERT_EQ(dmuon_step(opt), DMUON_SUCCESS);
  EXPECT_NE(p[0], before);
}

TEST(Lifetime, ContextFirstThenStepThenOptimizer) {
  dmuon_context_t ctx = nullptr;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
  dmuon_optimizer_t opt = make_optimizer(ctx);
  const dmuon_context_t stale = ctx;
  EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);
  EXPECT_EQ(ctx, nullptr);
  // The optimizer keeps its context: it steps, and its failures still have a message.
  step_moves(opt);
  EXPECT_EQ(dmuon_param_view(opt, 7, nullptr, nullptr), DMUON_ERR_INVALID_PARAM_ID);
  EXPECT_NE(std::string(dmuon_context_last_error(stale)).find("out of range"), std::string::npos);
  // The user's (stale) handle is dead to the user, although the context lives on.
  int rank = -1;
  EXPECT_EQ(dmuon_context_rank(stale, &rank, nullptr), DMUON_ERR_NULL_HANDLE);
  dmuon_optimizer_t other = nullptr;
  EXPECT_EQ(dmuon_optimizer_create(stale, nullptr, &other), DMUON_ERR_NULL_HANDLE);
  EXPECT_EQ(dmuon_optimizer_destroy(&opt), DMUON_SUCCESS);
  EXPECT_EQ(opt, nullptr);
  EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);  // NULL by now: harmless
}

TEST(Lifetime, EveryOrderOfThreeHandlesWithStepsBetween) {
  // Handles 0, 1: optimizers; 2: the context. Every permutation of destroys,
  // each live optimizer stepping after each destroy.
  std::array<int, 3> order = {0, 1, 2};
  int permutations = 0;
  do {
    SCOPED_TRACE("destroy order " + std::to_string(order[0]) + std::to_string(order[1]) + std::to_string(order[2]));
    dmuon_context_t ctx = nullptr;
    ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    std::array<dmuon_optimizer_t, 2> opts = {make_optimizer(ctx), make_optimizer(ctx)};
    for (int handle : order) {
      if (handle == 2)
        EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);
      else
        EXPECT_EQ(dmuon_optimizer_destroy(&opts[static_cast<std::size_t>(handle)]), DMUON_SUCCESS);
      for (dmuon_optimizer_t o : opts)
        if (o) step_moves(o);
    }
    EXPECT_EQ(ctx, nullptr);
    EXPECT_EQ(opts[0], nullptr);
    EXPECT_EQ(opts[1], nullptr);
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 6);
}

TEST(Lifetime, UnfinalizedOptimizerOutlivesItsContext) {
  dmuon_context_t ctx = nullptr;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
  dmuon_optimizer_t opt = nullptr;
  ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);
  // Registration and finalize (a collective on the context's communicator) still work.
  const int64_t b[1] = {5};
  EXPECT_EQ(dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b, 1.0, 1.0, nullptr), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS);
  step_moves(opt, 0);
  EXPECT_EQ(dmuon_optimizer_destroy(&opt), DMUON_SUCCESS);
}

}  // namespace
