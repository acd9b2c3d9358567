// Ranks that register different lists all get the mismatch status, with a
// message naming the first differing parameter, and nobody hangs.
#include <gtest/gtest.h>

#include <mpi.h>

#include <string>

#include "dmuon/dmuon.h"

namespace {

struct Both {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  Both() {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    dmuon_context_rank(ctx, &rank, &world);
    EXPECT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  }
  ~Both() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  void add(const char* name, int kind, int dtype, int64_t r, int64_t c) {
    const int64_t s[2] = {r, c};
    ASSERT_EQ(dmuon_register(opt, name, kind, dtype, 2, s, 1, 1, nullptr), DMUON_SUCCESS);
  }
};

void expect_mismatch(Both& b, const std::string& name) {
  EXPECT_EQ(dmuon_optimizer_finalize(b.opt), DMUON_ERR_REGISTRATION_MISMATCH);
  const std::string msg = dmuon_context_last_error(b.ctx);
  EXPECT_NE(msg.find("#1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  // Every rank gets rank 0's message, which names a rank that differs.
  std::string root = msg;
  int len = static_cast<int>(root.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  root.resize(static_cast<std::size_t>(len));
  MPI_Bcast(&root[0], len, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(msg, root);
  EXPECT_EQ(dmuon_step(b.opt), DMUON_ERR_NOT_FINALIZED);  // stays unfinalized
}

TEST(Registration, IdenticalListsFinalize) {
  Both b;
  b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
  b.add("b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, 4);
  EXPECT_EQ(dmuon_optimizer_finalize(b.opt), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
}

TEST(Registration, DifferentShapeOnLastRank) {
  Both b;
  b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
  b.add("b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b.rank == b.world - 1 ? 5 : 4);
  expect_mismatch(b, "'b'");
}

TEST(Registration, DifferentNameDtypeKindOrCount) {
  {
    Both b;
    b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
    b.add(b.rank == 0 ? "x" : "y", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, 4);
    expect_mismatch(b, b.rank == 0 ? "'x'" : "'y'");
  }
  {
    Both b;
    b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
    b.add("b", DMUON_KIND_ADAM, b.rank == 0 ? DMUON_DTYPE_FP32 : DMUON_DTYPE_BF16, 1, 4);
    expect_mismatch(b, "'b'");
  }
  {
    Both b;
    b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
    b.add("b", b.rank == 0 ? DMUON_KIND_ADAM : DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, 4);
    expect_mismatch(b, "'b'");
  }
  {
    Both b;  // rank 0 registers one parameter more
    b.add("w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 4, 4);
    if (b.rank == 0) b.add("extra", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, 4);
    expect_mismatch(b, "'extra'");
  }
}

}  // namespace
